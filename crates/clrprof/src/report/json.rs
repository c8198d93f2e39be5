//! The JSON report document (schema in docs/report-json.md).

use std::collections::HashMap;

use anyhow::Result;
use clrprof_model::views::{call_tree, function_rows, FunctionRow};
use clrprof_model::{FrameKey, Profile};
use serde_json::{json, Map, Value};

use super::select;
use super::ReportOptions;

/// Version of the JSON report schema; additions keep it, incompatible changes bump it.
pub const SCHEMA_VERSION: u32 = 1;

fn iso8601(unix_ns: u64) -> String {
    // Civil-from-days (Howard Hinnant), UTC.
    let secs = (unix_ns / 1_000_000_000) as i64;
    let ms = (unix_ns / 1_000_000) % 1000;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}Z", rem / 3600, (rem / 60) % 60, rem % 60)
}

/// Instrumented cost fields of a function row (exact calls and times).
fn cost_fields(r: &FunctionRow) -> Map<String, Value> {
    let (s, i) = (&r.self_cost, &r.inclusive);
    let mut m = Map::new();
    m.insert("calls".into(), json!(s.calls));
    m.insert("exclusive_ns".into(), json!(s.time_ns));
    m.insert("inclusive_ns".into(), json!(i.time_ns));
    m.insert("callee_ns".into(), json!(i.time_ns.saturating_sub(s.time_ns)));
    m.insert("suspended_ns".into(), json!(i.suspended_ns));
    m.insert("profiler_ns".into(), json!(i.profiler_ns));
    m
}

/// The whole report document; cost figures honour `--thread`.
pub fn document(p: &Profile, opts: &ReportOptions) -> Result<Value> {
    let sel = select::threads(p, opts.thread.as_deref())?;
    let keep = |x: u32| sel.as_ref().map(|s| s.contains(&x)).unwrap_or(true);
    let filter: Option<&dyn Fn(u32) -> bool> = if sel.is_some() { Some(&keep) } else { None };
    let names = select::display_names(p);
    let rows = function_rows(&p.costs, filter);
    let by_function: HashMap<u64, &FunctionRow> = rows
        .iter()
        .filter_map(|r| match p.costs.stacks.frames[r.frame.0 as usize].key {
            FrameKey::Function(id) => Some((id, r)),
            _ => None,
        })
        .collect();
    let instrumented = p.instrumentation.is_some();
    let mut doc = base_document(p);
    if let Some(funcs) = doc["functions"].as_array_mut() {
        for f in funcs.iter_mut() {
            let id = f["id"].as_u64().unwrap_or(0);
            if let (Some(obj), true) = (f.as_object_mut(), instrumented) {
                let fields = by_function.get(&id).map(|r| cost_fields(r)).unwrap_or_else(|| {
                    cost_fields(&FunctionRow {
                        frame: clrprof_model::FrameId(0),
                        self_cost: Default::default(),
                        inclusive: Default::default(),
                    })
                });
                obj.extend(fields);
            }
        }
    }
    if let (Some(i), Some(obj)) = (&p.instrumentation, doc.as_object_mut()) {
        obj.insert(
            "instrumentation".into(),
            json!({
                "inlining_disabled": i.inlining_disabled,
                "tiering_disabled": i.tiering_disabled,
                "ready_to_run_ignored": i.ready_to_run_ignored,
                "profiler_time_subtracted": i.profiler_time_subtracted,
                "counts_only": i.counts_only,
                "flow": i.flow,
                "include": i.include,
                "exclude": i.exclude,
                "hook_cost_ns": i.hook_cost_ns,
                "hooked_functions": i.hooked_functions,
                "filtered_functions": i.filtered_functions,
            }),
        );
        // The merged call tree, nested.
        let (nodes, roots) = call_tree(&p.costs, filter);
        fn node_json(nodes: &[clrprof_model::views::TreeNode], names: &[String], n: usize) -> Value {
            let node = &nodes[n];
            let mut kids: Vec<usize> = node.children.clone();
            kids.sort_by(|&a, &b| nodes[b].inclusive.time_ns.cmp(&nodes[a].inclusive.time_ns).then(a.cmp(&b)));
            json!({
                "name": names[node.frame.0 as usize],
                "calls": node.self_cost.calls,
                "inclusive_ns": node.inclusive.time_ns,
                "exclusive_ns": node.self_cost.time_ns,
                "suspended_ns": node.inclusive.suspended_ns,
                "profiler_ns": node.inclusive.profiler_ns,
                "children": kids.iter().map(|&k| node_json(nodes, names, k)).collect::<Vec<_>>(),
            })
        }
        let mut rs = roots.clone();
        rs.sort_by(|&a, &b| nodes[b].inclusive.time_ns.cmp(&nodes[a].inclusive.time_ns).then(a.cmp(&b)));
        obj.insert("calltree".into(), Value::Array(rs.iter().map(|&r| node_json(&nodes, &names, r)).collect()));
        // Per-thread hot spots.
        let per_thread: Vec<Value> = p
            .costs
            .threads
            .iter()
            .filter(|t| keep(t.os_tid))
            .map(|t| {
                let tid = t.os_tid;
                let mut rows = function_rows(&p.costs, Some(&|x| x == tid));
                rows.sort_by(|a, b| b.self_cost.time_ns.cmp(&a.self_cost.time_ns).then(a.frame.cmp(&b.frame)));
                json!({
                    "os_tid": tid,
                    "name": p.thread_by_os_tid(tid).map(|th| th.name.clone()).unwrap_or_default(),
                    "functions": rows.iter().map(|r| {
                        let mut m = cost_fields(r);
                        m.insert("name".into(), json!(names[r.frame.0 as usize]));
                        Value::Object(m)
                    }).collect::<Vec<_>>(),
                })
            })
            .collect();
        obj.insert("thread_hotspots".into(), Value::Array(per_thread));
    }
    if !p.flow.is_empty() {
        if let Some(obj) = doc.as_object_mut() {
            let fnames: HashMap<u64, &str> = p.functions.iter().map(|f| (f.id, f.name.as_str())).collect();
            obj.insert(
                "flow".into(),
                Value::Array(
                    p.flow
                        .iter()
                        .filter(|t| keep(t.os_tid))
                        .map(|t| {
                            json!({
                                "os_tid": t.os_tid,
                                "dropped": t.dropped,
                                "events": t.events.iter().map(|e| json!({
                                    "kind": FLOW_KINDS.get(e.kind as usize).copied().unwrap_or("other"),
                                    "function": fnames.get(&e.function).copied().unwrap_or(""),
                                    "ts_ns": e.ts,
                                })).collect::<Vec<_>>(),
                            })
                        })
                        .collect(),
                ),
            );
        }
    }
    Ok(doc)
}

const FLOW_KINDS: [&str; 4] = ["enter", "leave", "tailcall", "unwind"];

fn base_document(p: &Profile) -> Value {
    let pr = &p.process;
    let module_path = |id: u64| p.module(id).map(|m| m.path.clone());
    let module_file = |id: u64| p.module(id).map(|m| m.file_name().to_string());
    let assembly_name = |id: u64| p.assemblies.iter().find(|a| a.id == id).map(|a| a.name.clone());
    let mut doc = json!({
        "schema_version": SCHEMA_VERSION,
        "process": {
            "pid": pr.pid,
            "command_line": pr.command_line,
            "runtime_version": pr.runtime_version,
            "exit_code": pr.exit_code,
            "signal": pr.signal,
            "start_time": iso8601(pr.start_unix_ns),
            "start_unix_ns": pr.start_unix_ns,
            "duration_ns": pr.duration_ns,
            "clean_shutdown": pr.clean_shutdown,
            "agent_version": pr.agent_version,
            "profiler_info_version": pr.info_version,
        },
        "threads": p.threads.iter().map(|t| json!({
            "id": t.id,
            "os_tid": t.os_tid,
            "name": t.name,
            "names": t.names.iter().map(|(ts, n)| json!({"ts_ns": ts, "name": n})).collect::<Vec<_>>(),
            "created_ns": t.created_ns,
            "destroyed_ns": t.destroyed_ns,
        })).collect::<Vec<_>>(),
        "appdomains": p.appdomains.iter().map(|a| json!({
            "id": a.id, "name": a.name, "created_ns": a.created_ns, "unloaded_ns": a.unloaded_ns,
        })).collect::<Vec<_>>(),
        "assemblies": p.assemblies.iter().map(|a| json!({
            "id": a.id,
            "name": a.name,
            "appdomain": p.appdomain(a.appdomain).map(|d| d.name.clone()),
            "appdomain_id": a.appdomain,
            "module": module_path(a.module),
            "module_id": a.module,
            "loaded_ns": a.loaded_ns,
            "load_ns": a.load_ns,
            "unloaded_ns": a.unloaded_ns,
        })).collect::<Vec<_>>(),
        "modules": p.modules.iter().map(|m| json!({
            "id": m.id,
            "path": m.path,
            "name": m.file_name(),
            "base_address": m.base_address,
            "assembly": assembly_name(m.assembly),
            "assembly_id": m.assembly,
            "loaded_ns": m.loaded_ns,
            "load_ns": m.load_ns,
            "unloaded_ns": m.unloaded_ns,
        })).collect::<Vec<_>>(),
        "classes": p.classes.iter().map(|c| json!({
            "id": c.id,
            "name": c.name,
            "token": c.token,
            "module": module_file(c.module),
            "module_id": c.module,
            "loaded_ns": c.loaded_ns,
            "unloaded_ns": c.unloaded_ns,
        })).collect::<Vec<_>>(),
        "functions": p.functions.iter().map(|f| json!({
            "id": f.id,
            "name": f.name,
            "signature": f.signature,
            "token": f.token,
            "class": f.class_name,
            "class_id": f.class,
            "module": module_file(f.module),
            "module_id": f.module,
            "code_start": f.code_start,
            "code_size": f.code_size,
            "jit_ns": f.jit_ns,
            "kind": f.kind_name(),
            "compilations": f.compilations,
        })).collect::<Vec<_>>(),
        "messages": p.messages,
    });
    super::sampling_json::extend(p, &mut doc);
    super::events_json::extend(&mut doc, p);
    doc
}

#[cfg(test)]
mod tests {
    #[test]
    fn iso_dates() {
        assert_eq!(super::iso8601(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(super::iso8601(1_700_000_000_123_000_000), "2023-11-14T22:13:20.123Z");
    }
}
