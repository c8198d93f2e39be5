//! Sampling additions to the JSON report (docs/report-json.md, "Sampling").

use std::collections::HashMap;

use clrprof_model::samples::{hits, ModuleHits};
use clrprof_model::{views, FrameKey, Metric, Profile};
use serde_json::{json, Value};

/// Adds sampled costs to `functions` and `modules`, and the `sampling` section.
pub fn extend(p: &Profile, doc: &mut Value) {
    let s = &p.sampling;
    let rows = views::function_rows(&p.costs, None);
    let by_function: HashMap<u64, &views::FunctionRow> = rows
        .iter()
        .filter_map(|r| match p.costs.stacks.frames[r.frame.0 as usize].key {
            FrameKey::Function(id) => Some((id, r)),
            _ => None,
        })
        .collect();
    if let Some(fs) = doc.get_mut("functions").and_then(|v| v.as_array_mut()) {
        for f in fs {
            let Some(id) = f.get("id").and_then(|v| v.as_u64()) else { continue };
            let (sc, ic) = by_function.get(&id).map(|r| (r.self_cost, r.inclusive)).unwrap_or_default();
            if let Some(o) = f.as_object_mut() {
                o.insert("samples_self".into(), json!(sc.cpu_samples));
                o.insert("samples_total".into(), json!(ic.cpu_samples));
                o.insert("cpu_self_ns".into(), json!(sc.cpu_ns));
                o.insert("cpu_total_ns".into(), json!(ic.cpu_ns));
                o.insert("wall_samples_self".into(), json!(sc.wall_samples));
                o.insert("wall_samples_total".into(), json!(ic.wall_samples));
                o.insert("wall_self_ns".into(), json!(sc.wall_ns));
                o.insert("wall_total_ns".into(), json!(ic.wall_ns));
            }
        }
    }
    let (cpu_modules, cpu_routines) = hits(p, Metric::Cpu, None);
    let (wall_modules, _) = hits(p, Metric::Wall, None);
    let cpu_by_module: HashMap<&str, &ModuleHits> = cpu_modules.iter().map(|m| (m.module.as_str(), m)).collect();
    let wall_by_module: HashMap<&str, &ModuleHits> = wall_modules.iter().map(|m| (m.module.as_str(), m)).collect();
    if let Some(ms) = doc.get_mut("modules").and_then(|v| v.as_array_mut()) {
        for m in ms {
            let name = m.get("name").and_then(|v| v.as_str()).unwrap_or_default().to_string();
            let n = cpu_by_module.get(name.as_str()).map(|h| h.samples).unwrap_or(0);
            if let Some(o) = m.as_object_mut() {
                o.insert("samples".into(), json!(n));
            }
        }
    }
    let mut all_modules: Vec<&str> = cpu_by_module.keys().chain(wall_by_module.keys()).copied().collect();
    all_modules.sort();
    all_modules.dedup();
    let threads: Vec<Value> = p
        .costs
        .threads
        .iter()
        .map(|t| {
            let mut c = clrprof_model::Cost::default();
            for v in t.costs.values() {
                c.add(v);
            }
            json!({
                "os_tid": t.os_tid,
                "name": p.thread_by_os_tid(t.os_tid).map(|x| x.name.clone()).unwrap_or_default(),
                "cpu_samples": c.cpu_samples,
                "cpu_ns": c.cpu_ns,
                "wall_samples": c.wall_samples,
                "wall_ns": c.wall_ns,
            })
        })
        .filter(|v| v["cpu_samples"] != 0 || v["wall_samples"] != 0)
        .collect();
    let frame_name = |f: clrprof_model::FrameId| p.costs.stacks.frames[f.0 as usize].name.clone();
    doc["sampling"] = json!({
        "enabled": s.enabled(),
        "rate_hz": s.cpu_rate_hz,
        "wall_rate_hz": s.wall_rate_hz,
        "effective_cpu_rate_hz": (s.effective_cpu_rate() * 10.0).round() / 10.0,
        "total_samples": s.cpu_samples,
        "cpu_ns": s.cpu_ns,
        "wall_samples": s.wall_samples,
        "wall_ns": s.wall_ns,
        "cpu_samples_dropped": s.cpu_dropped,
        "stack_walks": s.walks,
        "suspend_failures": s.suspend_failures,
        "walk_failures": s.walk_failures,
        "timer_failures": s.timer_failures,
        "suspended_ns": s.suspended_ns,
        "sampler_cpu_ns": s.sampler_cpu_ns,
        "threads": threads,
        "modules": all_modules.iter().map(|m| {
            let c = cpu_by_module.get(m);
            let w = wall_by_module.get(m);
            json!({
                "name": m,
                "samples": c.map(|h| h.samples).unwrap_or(0),
                "cpu_ns": c.map(|h| h.ns).unwrap_or(0),
                "wall_samples": w.map(|h| h.samples).unwrap_or(0),
                "wall_ns": w.map(|h| h.ns).unwrap_or(0),
            })
        }).collect::<Vec<_>>(),
        "routines": cpu_routines.iter().map(|r| json!({
            "name": frame_name(r.frame),
            "module": r.module,
            "address": r.address,
            "samples": r.samples,
            "cpu_ns": r.ns,
        })).collect::<Vec<_>>(),
    });
}
