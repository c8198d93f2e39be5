//! Runtime-event keys of the JSON report: `exceptions`, `gcs`, `gc_totals`, `allocations`,
//! `allocation_sites`, `jit`, `counters`, `events` (schema in docs/report-json.md).

use clrprof_model::Profile;
use serde_json::{json, Value};

pub fn extend(doc: &mut Value, p: &Profile) {
    let Some(obj) = doc.as_object_mut() else { return };
    let ev = &p.events;
    let exceptions: Vec<Value> = ev
        .exceptions
        .iter()
        .map(|e| {
            json!({
                "type": e.type_name,
                "throw_site": e.throw_site,
                "thrown": e.thrown,
                "observed": e.observed,
                "estimated": e.estimated,
                "caught": e.caught,
                "uncaught": e.uncaught,
                "uncaught_threads": e.uncaught_threads,
                "catch_sites": e.catch_sites.iter().map(|(f, n)| json!({"function": f, "count": n})).collect::<Vec<_>>(),
                "passes": {
                    "search_frames": e.search_frames,
                    "filters": e.filters,
                    "unwind_frames": e.unwind_frames,
                    "finallies": e.finallies,
                    "catches": e.catches,
                },
                "sites": e.stacks.iter().map(|(s, n)| json!({
                    "count": n,
                    "stack": super::exceptions::stack_names(p, *s),
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    obj.insert("exceptions".into(), Value::Array(exceptions));
    let sm = &ev.exception_sampling;
    obj.insert(
        "exception_sampling".into(),
        json!({
            "sampled": sm.sampled,
            "observed": sm.observed,
            "estimated_total": sm.estimated_total,
            "first_pause_ns": sm.first_pause_ns,
            "paused_ns": sm.paused_ns,
            "window_ns": sm.window_ns,
            "unfollowed": sm.unfollowed,
        }),
    );
    let gcs: Vec<Value> = ev
        .gcs
        .iter()
        .map(|g| {
            json!({
                "index": g.index,
                "generation": g.generation,
                "reason": g.reason,
                "induced": g.induced,
                "background": g.background,
                "start_ns": g.start_ns,
                "duration_ns": g.duration_ns,
                "pause_ns": g.pause_ns,
                "finished": g.finished,
                "heap_before": g.before,
                "heap_after": g.after,
                "os_tid": g.os_tid,
            })
        })
        .collect();
    let dur = p.process.duration_ns.max(1) as f64;
    let in_gc = super::gc::time_in_gc(p);
    let per_gen = [0u8, 1, 2].map(|n| ev.gcs.iter().filter(|g| g.generation == n).count());
    obj.insert(
        "gc_totals".into(),
        json!({
            "count": ev.gcs.len(),
            "per_generation": per_gen,
            "induced": ev.gcs.iter().filter(|g| g.induced).count(),
            "background": ev.gcs.iter().filter(|g| g.background == Some(true)).count(),
            "time_in_gc_ns": in_gc,
            "time_in_gc_pct": in_gc as f64 * 100.0 / dur,
            "pause_ns": ev.gcs.iter().map(|g| g.pause_ns).sum::<u64>(),
            "largest_pause_ns": ev.gcs.iter().map(|g| g.pause_ns).max().unwrap_or(0),
        }),
    );
    obj.insert("gcs".into(), Value::Array(gcs));
    obj.insert(
        "allocations".into(),
        ev.allocations
            .iter()
            .map(|a| json!({"type": a.type_name, "count": a.count, "bytes": a.bytes, "exact": a.exact, "samples": a.samples}))
            .collect(),
    );
    obj.insert(
        "allocation_sites".into(),
        ev.alloc_sites
            .iter()
            .map(|s| {
                json!({"type": s.type_name, "function": s.function, "count": s.count, "bytes": s.bytes, "samples": s.samples, "exact": false})
            })
            .collect(),
    );
    let jitted: Vec<_> = p.functions.iter().filter(|f| f.kind != clrprof_trace::code_kind::PRECOMPILED).collect();
    obj.insert(
        "jit".into(),
        json!({
            "methods": jitted.len(),
            "code_versions": jitted.iter().map(|f| f.compilations as u64).sum::<u64>(),
            "jit_ns": jitted.iter().map(|f| f.jit_ns).sum::<u64>(),
            "native_bytes": jitted.iter().map(|f| f.code_size).sum::<u64>(),
            "il_bytes": jitted.iter().map(|f| ev.il_sizes.get(&f.id).copied().unwrap_or(0) as u64).sum::<u64>(),
            "il_sizes": jitted.iter().filter_map(|f| ev.il_sizes.get(&f.id).map(|n| json!({"function": f.name, "id": f.id, "il_size": n}))).collect::<Vec<_>>(),
            "precompiled_methods": p.functions.len() - jitted.len(),
            "assembly_load_ns": p.assemblies.iter().map(|a| a.load_ns).sum::<u64>(),
            "module_load_ns": p.modules.iter().map(|m| m.load_ns).sum::<u64>(),
        }),
    );
    obj.insert(
        "contentions".into(),
        ev.contentions
            .iter()
            .map(|c| {
                json!({
                    "site": c.site,
                    "count": c.count,
                    "wait_ns": c.wait_ns,
                    "max_wait_ns": c.max_wait_ns,
                    "stacks": c.stacks.iter().map(|(s, n)| json!({
                        "count": n,
                        "stack": super::exceptions::stack_names(p, *s),
                    })).collect::<Vec<_>>(),
                })
            })
            .collect(),
    );
    obj.insert(
        "counters".into(),
        json!({
            "interval_ns": ev.counter_interval_ns,
            "alloc_exact": ev.alloc_exact,
            "rows": ev.counters.iter().map(|r| json!({
                "start_ns": r.start_ns,
                "end_ns": r.end_ns,
                "gc_count": r.gc_count,
                "heap_bytes": r.heap_bytes,
                "time_in_gc_pct": r.time_in_gc_pct,
                "alloc_bytes_per_sec": r.alloc_rate,
                "exceptions_per_sec": r.exceptions_per_sec,
                "methods_jitted": r.methods_jitted,
                "assemblies_loaded": r.assemblies_loaded,
                "threads": r.threads,
                "lock_contentions": r.lock_contentions,
            })).collect::<Vec<_>>(),
        }),
    );
    obj.insert(
        "events".into(),
        if ev.log_enabled {
            ev.log
                .iter()
                .map(|e| json!({"ts_ns": e.ts, "os_tid": e.os_tid, "event": e.what, "nest": e.nest, "depth": e.depth}))
                .collect()
        } else {
            Value::Null
        },
    );
}
