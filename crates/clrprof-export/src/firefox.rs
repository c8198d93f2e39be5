//! The Firefox Profiler's format (https://profiler.firefox.com, "Load a profile from file"): its
//! processed profile format, version 57 (the layout documented in the profiler's
//! `src/types/profile.js`; the version the profiler upgrades from, as other profilers emit it).
//! One thread per profiled thread with its samples in time order and their stacks, functions per
//! method with their module as resource, GCs as interval markers and exceptions as instant markers.

use std::collections::HashMap;
use std::io::Write;

use clrprof_model::samples::SampleWeight;
use clrprof_model::{FrameId, FrameKind, Metric, Profile, StackId};
use clrprof_query::select;
use serde_json::{json, Value};

use super::{ExportInput, Exporter, Result};

pub struct Firefox;

/// The processed-format version written (the Firefox Profiler upgrades older versions on load).
pub const PROCESSED_VERSION: u32 = 57;
/// The Gecko (raw) format version the meta claims alongside it.
pub const GECKO_VERSION: u32 = 32;

/// Category indexes of `CATEGORIES`.
const MANAGED: usize = 1;
const NATIVE: usize = 2;
const GC: usize = 3;
const EXCEPTION: usize = 4;

fn categories() -> Value {
    json!([
        { "name": "Other", "color": "grey", "subcategories": ["Other"] },
        { "name": ".NET", "color": "blue", "subcategories": ["Other"] },
        { "name": "Native", "color": "orange", "subcategories": ["Other"] },
        { "name": "GC", "color": "yellow", "subcategories": ["Other"] },
        { "name": "Exception", "color": "red", "subcategories": ["Other"] },
    ])
}

/// Strings shared by all threads.
#[derive(Default)]
struct Strings {
    index: HashMap<String, usize>,
    list: Vec<String>,
}

impl Strings {
    fn id(&mut self, s: &str) -> usize {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        self.list.push(s.to_string());
        self.index.insert(s.to_string(), self.list.len() - 1);
        self.list.len() - 1
    }
}

/// One thread's tables, built as its samples are added.
#[derive(Default)]
struct ThreadTables {
    // samples
    s_stack: Vec<usize>,
    s_time: Vec<f64>,
    s_weight: Vec<u64>,
    // stackTable
    st_frame: Vec<usize>,
    st_category: Vec<usize>,
    st_prefix: Vec<Option<usize>>,
    stacks: HashMap<StackId, usize>,
    // frameTable + funcTable (one frame per function; in a profile built with lines, one frame per
    // line and one function per method, with its source file)
    f_func: Vec<usize>,
    f_category: Vec<usize>,
    f_line: Vec<Option<u32>>,
    fn_name: Vec<usize>,
    fn_is_js: Vec<bool>,
    fn_resource: Vec<Option<usize>>,
    fn_file: Vec<Option<usize>>,
    frames: HashMap<FrameId, usize>,
    /// Functions of frames with a line, by (name, signature, module, file).
    lined_funcs: HashMap<(String, String, String, String), usize>,
    // resourceTable
    r_name: Vec<usize>,
    resources: HashMap<String, usize>,
    // markers
    m_name: Vec<usize>,
    m_start: Vec<f64>,
    m_end: Vec<Option<f64>>,
    m_phase: Vec<u8>,
    m_category: Vec<usize>,
    m_data: Vec<Value>,
}

impl ThreadTables {
    fn frame(&mut self, p: &Profile, strings: &mut Strings, f: FrameId) -> usize {
        if let Some(&i) = self.frames.get(&f) {
            return i;
        }
        let fr = &p.costs.stacks.frames[f.0 as usize];
        let category = if fr.kind == FrameKind::Managed { MANAGED } else { NATIVE };
        let resource = (!fr.module.is_empty()).then(|| {
            let n = self.resources.len();
            *self.resources.entry(fr.module.clone()).or_insert_with(|| {
                self.r_name.push(strings.id(&fr.module));
                n
            })
        });
        let known = fr.line.as_ref().and_then(|l| {
            self.lined_funcs.get(&(fr.name.clone(), fr.signature.clone(), fr.module.clone(), l.file.clone()))
        });
        let func = match known {
            Some(&func) => func,
            None => {
                self.fn_name.push(strings.id(&fr.name));
                self.fn_is_js.push(false);
                self.fn_resource.push(resource);
                self.fn_file.push(fr.line.as_ref().map(|l| strings.id(&l.file)));
                let func = self.fn_name.len() - 1;
                if let Some(l) = &fr.line {
                    let key = (fr.name.clone(), fr.signature.clone(), fr.module.clone(), l.file.clone());
                    self.lined_funcs.insert(key, func);
                }
                func
            }
        };
        self.f_func.push(func);
        self.f_category.push(category);
        self.f_line.push(fr.line.as_ref().map(|l| l.line));
        let i = self.f_func.len() - 1;
        self.frames.insert(f, i);
        i
    }

    fn stack(&mut self, p: &Profile, strings: &mut Strings, s: StackId) -> usize {
        if let Some(&i) = self.stacks.get(&s) {
            return i;
        }
        let node = *p.costs.stacks.node(s);
        let prefix = node.parent.map(|parent| self.stack(p, strings, parent));
        let frame = self.frame(p, strings, node.frame);
        self.st_frame.push(frame);
        self.st_category.push(self.f_category[frame]);
        self.st_prefix.push(prefix);
        let i = self.st_frame.len() - 1;
        self.stacks.insert(s, i);
        i
    }

    fn marker(&mut self, name: usize, start: f64, end: Option<f64>, category: usize, data: Value) {
        self.m_name.push(name);
        self.m_start.push(start);
        self.m_phase.push(if end.is_some() { 1 } else { 0 });
        self.m_end.push(end);
        self.m_category.push(category);
        self.m_data.push(data);
    }

    fn json(self, p: &Profile, tid: u32, name: String) -> Value {
        let (n_s, n_st, n_f, n_fn, n_r, n_m) = (
            self.s_stack.len(),
            self.st_frame.len(),
            self.f_func.len(),
            self.fn_name.len(),
            self.r_name.len(),
            self.m_name.len(),
        );
        let nulls = |n: usize| vec![Value::Null; n];
        let zeros = |n: usize| vec![0; n];
        json!({
            "name": name,
            "isMainThread": tid == p.process.pid,
            "processStartupTime": 0,
            "processShutdownTime": Value::Null,
            "registerTime": 0,
            "unregisterTime": Value::Null,
            "pausedRanges": [],
            "pid": p.process.pid.to_string(),
            "tid": tid,
            "processType": "default",
            "processName": select::short_command(&p.process.command_line),
            "samples": {
                "stack": self.s_stack, "time": self.s_time, "eventDelay": nulls(n_s),
                "weight": self.s_weight, "weightType": "samples", "length": n_s,
            },
            "stackTable": {
                "frame": self.st_frame, "category": self.st_category, "subcategory": zeros(n_st),
                "prefix": self.st_prefix, "length": n_st,
            },
            "frameTable": {
                "address": vec![-1; n_f], "category": self.f_category, "subcategory": zeros(n_f),
                "func": self.f_func, "innerWindowID": nulls(n_f), "implementation": nulls(n_f),
                "optimizations": nulls(n_f), "line": self.f_line, "column": nulls(n_f),
                "inlineDepth": zeros(n_f), "nativeSymbol": nulls(n_f), "length": n_f,
            },
            "funcTable": {
                "name": self.fn_name, "isJS": self.fn_is_js, "relevantForJS": vec![false; n_fn],
                "resource": self.fn_resource.iter().map(|r| r.map_or(-1, |r| r as i64)).collect::<Vec<_>>(),
                "fileName": self.fn_file, "lineNumber": nulls(n_fn), "columnNumber": nulls(n_fn),
                "length": n_fn,
            },
            "resourceTable": {
                "lib": nulls(n_r), "name": self.r_name, "host": nulls(n_r), "type": vec![1; n_r], "length": n_r,
            },
            "nativeSymbols": { "libIndex": [], "address": [], "name": [], "functionSize": [], "length": 0 },
            "markers": {
                "data": self.m_data, "name": self.m_name, "startTime": self.m_start, "endTime": self.m_end,
                "phase": self.m_phase, "category": self.m_category, "length": n_m,
            },
        })
    }
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// The profile for a weight (CPU or wall samples) and a thread selection.
pub fn document(p: &Profile, metric: Metric, threads: &select::Threads) -> Value {
    let weight = if metric == Metric::Wall { SampleWeight::Wall } else { SampleWeight::Cpu };
    let mut strings = Strings::default();
    let mut tables: std::collections::BTreeMap<u32, ThreadTables> = Default::default();
    for s in p.samples.iter().filter(|s| s.weight == weight && threads.contains(s.os_tid)) {
        let t = tables.entry(s.os_tid).or_default();
        let stack = t.stack(p, &mut strings, s.stack);
        t.s_stack.push(stack);
        t.s_time.push(ms(s.ts));
        t.s_weight.push(s.count as u64);
    }
    let gc_name = strings.id("GC");
    for g in p.events.gcs.iter().filter(|g| threads.contains(g.os_tid)) {
        let data = json!({
            "type": "GC", "generation": g.generation, "reason": g.reason,
            "pauseMs": ms(g.pause_ns), "background": g.background,
        });
        tables.entry(g.os_tid).or_default().marker(
            gc_name,
            ms(g.start_ns),
            Some(ms(g.start_ns + g.duration_ns)),
            GC,
            data,
        );
    }
    let exc_name = strings.id("Exception");
    let times = &p.events.times;
    for &(ts, tid) in times.throws.iter().chain(&times.sampled_throws).filter(|(_, t)| threads.contains(*t)) {
        tables.entry(tid).or_default().marker(exc_name, ms(ts), None, EXCEPTION, json!({ "type": "Exception" }));
    }
    let interval = match weight {
        SampleWeight::Cpu if p.sampling.cpu_rate_hz > 0 => 1000.0 / p.sampling.cpu_rate_hz as f64,
        SampleWeight::Wall if p.sampling.wall_rate_hz > 0 => 1000.0 / p.sampling.wall_rate_hz as f64,
        _ => 1.0,
    };
    let threads_json: Vec<Value> = tables
        .into_iter()
        .map(|(tid, t)| {
            let name = select::thread_name(p, tid);
            let name = if name.is_empty() { format!("thread {tid}") } else { name };
            t.json(p, tid, name)
        })
        .collect();
    let marker_field = |key: &str, label: &str, format: &str| json!({ "key": key, "label": label, "format": format });
    json!({
        "meta": {
            "interval": interval,
            "startTime": p.process.start_unix_ns as f64 / 1e6,
            "abi": std::env::consts::ARCH,
            "misc": "",
            "oscpu": std::env::consts::ARCH,
            "platform": "Linux",
            "processType": 0,
            "categories": categories(),
            "stackwalk": 1,
            "toolkit": "",
            "version": GECKO_VERSION,
            "preprocessedProfileVersion": PROCESSED_VERSION,
            "appBuildID": "",
            "product": format!(".NET {} — {}", p.process.runtime_version, select::short_command(&p.process.command_line)),
            "symbolicated": true,
            "importedFrom": format!("clrprof {}", env!("CARGO_PKG_VERSION")),
            "markerSchema": [
                {
                    "name": "GC", "display": ["marker-chart", "marker-table", "timeline-overview"],
                    "tooltipLabel": "GC gen{marker.data.generation} ({marker.data.reason})",
                    "tableLabel": "GC gen{marker.data.generation} ({marker.data.reason})",
                    "chartLabel": "GC gen{marker.data.generation}",
                    "fields": [
                        marker_field("generation", "Generation", "integer"),
                        marker_field("reason", "Reason", "string"),
                        marker_field("pauseMs", "Pause", "milliseconds"),
                    ],
                },
                {
                    "name": "Exception", "display": ["marker-chart", "marker-table", "timeline-overview"],
                    "tooltipLabel": "exception", "tableLabel": "exception", "chartLabel": "exception",
                    "fields": [],
                },
            ],
            "extensions": { "id": [], "name": [], "baseURL": [], "length": 0 },
        },
        "libs": [],
        "pages": [],
        "threads": threads_json,
        "shared": { "stringArray": strings.list, "sources": { "length": 0, "uuid": [], "filename": [] } },
    })
}

impl Exporter for Firefox {
    fn extension(&self) -> &'static str {
        "firefox.json"
    }

    fn stacks_needed(&self) -> clrprof_query::weighted_stacks::Needed {
        clrprof_query::weighted_stacks::Needed::None
    }

    fn write(&self, inp: &ExportInput<'_>, out: &mut dyn Write) -> Result<()> {
        serde_json::to_writer(&mut *out, &document(inp.profile, inp.stacks.metric, &inp.threads))?;
        writeln!(out)?;
        Ok(())
    }
}
