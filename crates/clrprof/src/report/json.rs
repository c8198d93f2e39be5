//! The JSON report document (schema in docs/report-json.md).

use clrprof_model::Profile;
use serde_json::{json, Value};

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

pub fn document(p: &Profile) -> Value {
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
