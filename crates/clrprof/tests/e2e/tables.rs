//! End to end: the agent loads into .NET, streams a trace, and `clrprof report` prints the
//! General Code Profiler's tables with exact names.

use crate::common::*;
use std::collections::BTreeMap;

#[test]
fn types_app_classes_and_functions_are_named_exactly() {
    let _machine = machine::shared();
    let dir = scratch("types");
    let trace = dir.join("types.clrprof");
    let out = record("Types", &[], &trace, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "13 deeper 41 box 3 5 9 pear 13 node:1\n");
    let v = report_json(&trace);

    for class in [
        "Program",
        "Acme.Shapes.Outer",
        "Acme.Shapes.Outer+Inner",
        "Acme.Shapes.Outer+Inner+Deeper",
        "Acme.Shapes.Box<int>",
        "Acme.Shapes.Box<string>",
        "Acme.Shapes.Box<double>",
        "Acme.Shapes.Point",
        "Acme.Shapes.Algorithms",
        "Acme.Shapes.Generic.Pair<int, string>",
        "Acme.Shapes.Generic.Pair<int, string>+Node",
    ] {
        let c = find(&v, "classes", class);
        assert_eq!(c["module"], "Types.dll", "{class}");
        assert!(c["token"].as_u64().unwrap() >> 24 == 0x02, "{class} has a TypeDef token");
    }

    let expect = [
        ("Program.Main", "int ()"),
        ("Acme.Shapes.Outer+Inner.Compute", "int (int)"),
        ("Acme.Shapes.Outer+Inner+Deeper.Describe", "string ()"),
        ("Acme.Shapes.Box<int>.Get", "T ()"),
        ("Acme.Shapes.Box<__Canon>.Get", "T ()"),
        ("Acme.Shapes.Box<int>.Map<double>", "Acme.Shapes.Box<U> (System.Func<T, U>)"),
        ("Acme.Shapes.Point.Length", "double ()"),
        ("Acme.Shapes.Algorithms.Max<int>", "T (T, T)"),
        ("Acme.Shapes.Algorithms.Max<__Canon>", "T (T, T)"),
        (
            "Acme.Shapes.Algorithms.Scale",
            "double (Acme.Shapes.Point&, double, int[], System.Collections.Generic.List<string>)",
        ),
        ("Acme.Shapes.Generic.Pair<int, __Canon>+Node.Show", "string (TKey)"),
    ];
    for (name, sig) in expect {
        let f = find(&v, "functions", name);
        assert_eq!(f["signature"], sig, "{name}");
        assert_eq!(f["module"], "Types.dll", "{name}");
        assert_eq!(f["kind"], "jit", "{name}");
        assert!(f["code_size"].as_u64().unwrap() > 0, "{name} has code");
        assert!(f["code_start"].as_u64().unwrap() > 0, "{name} has an address");
        assert!(f["token"].as_u64().unwrap() >> 24 == 0x06, "{name} has a MethodDef token");
        assert!(f["jit_ns"].as_u64().unwrap() > 0, "{name} took time to JIT");
    }
    // Each app function appears once per instantiation, not once per JIT version.
    let count = names(&v, "functions", "name").iter().filter(|n| *n == "Acme.Shapes.Point.Length").count();
    assert_eq!(count, 1);

    let asm = find(&v, "assemblies", "Types");
    assert_eq!(asm["appdomain"], "DefaultDomain");
    assert!(asm["module"].as_str().unwrap().ends_with("/Types.dll"));
    let m = v["modules"].as_array().unwrap().iter().find(|m| m["name"] == "Types.dll").unwrap();
    assert_eq!(m["assembly"], "Types");
    assert!(m["base_address"].as_u64().unwrap() > 0);
    assert!(names(&v, "appdomains", "name").contains(&"DefaultDomain".to_string()));

    let p = &v["process"];
    assert_eq!(p["exit_code"], 0);
    assert_eq!(p["clean_shutdown"], true);
    assert!(p["runtime_version"].as_str().unwrap().split('.').next().unwrap().parse::<u32>().unwrap() >= 8);
    assert!(p["command_line"].as_str().unwrap().contains("Types.dll"));
    assert!(p["duration_ns"].as_u64().unwrap() > 0);
    assert!(p["start_time"].as_str().unwrap().ends_with('Z'));

    // The text report shows the same tables (the default view of a sampled trace is hot spots).
    let out = report(&trace, &["--view", "tables"]);
    assert!(out.status.success());
    let t = text(&out.stdout);
    for section in ["THREADS (", "APP DOMAINS (", "ASSEMBLIES (", "MODULES (", "CLASSES (", "FUNCTIONS ("] {
        assert!(t.contains(section), "missing {section}");
    }
    assert!(t.contains("Acme.Shapes.Generic.Pair<int, string>+Node"));
    // Deterministic: the same trace gives the same report byte for byte.
    assert_eq!(report(&trace, &["--view", "tables"]).stdout, out.stdout);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn named_threads_are_recorded_with_lifetimes() {
    let _machine = machine::shared();
    let dir = scratch("threads");
    let trace = dir.join("threads.clrprof");
    let out = record("Threads", &["4"], &trace, &[]);
    assert_eq!(out.status.code(), Some(7), "exit code passes through: {}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "threads=4 total=2207\n");
    let v = report_json(&trace);
    let threads = v["threads"].as_array().unwrap();
    for i in 0..4 {
        let name = format!("worker-{i}");
        let t = threads.iter().find(|t| t["name"] == name.as_str()).unwrap_or_else(|| panic!("no thread {name}"));
        let created = t["created_ns"].as_u64().expect("created");
        let destroyed = t["destroyed_ns"].as_u64().expect("destroyed");
        assert!(destroyed >= created);
        assert!(t["os_tid"].as_u64().unwrap() > 0);
        assert_eq!(t["names"].as_array().unwrap().len(), 1);
    }
    let renamed = threads.iter().find(|t| t["name"] == "renamed-later").expect("renamed thread");
    assert!(renamed["os_tid"].as_u64().unwrap() > 0);
    // Every OS tid is distinct; the main thread's tid is the process id.
    let mut tids: Vec<u64> = threads.iter().filter_map(|t| t["os_tid"].as_u64()).collect();
    let n = tids.len();
    tids.sort();
    tids.dedup();
    assert_eq!(tids.len(), n);
    assert!(tids.contains(&v["process"]["pid"].as_u64().unwrap()));
    find(&v, "functions", "Threads.Worker.Run");
    find(&v, "functions", "Threads.Worker.Step");
    let _ = std::fs::remove_dir_all(dir);
}

/// Names read from the metadata tables in each module's image (the default) are the names the
/// runtime's `IMetaDataImport` gives (`CLRPROF_METADATA=importer`): every function and class both
/// runs saw, hundreds of the app's and the framework's, has the same name, signature and class.
#[test]
fn names_from_module_images_equal_the_runtime_importer_s() {
    let _machine = machine::shared();
    let dir = scratch("md-image");
    let run = |trace: &std::path::Path, importer: bool| {
        let log = trace.with_extension("log");
        let mut c = std::process::Command::new(clrprof_exe());
        c.arg("record").arg("-o").arg(trace).arg("--agent").arg(agent_path()).arg("--log").arg(&log);
        c.arg("--").arg("dotnet").arg(app_dll("Types")).stdin(std::process::Stdio::null());
        if importer {
            c.env("CLRPROF_METADATA", "importer");
        }
        let out = c.output().expect("run clrprof record");
        assert!(out.status.success(), "{}", text(&out.stderr));
        let log = std::fs::read_to_string(&log).unwrap();
        // Every module of this app has an image: the importer is used only when asked for.
        assert_eq!(log.contains("runtime's metadata importer"), importer, "{log}");
        report_json(trace)
    };
    let image = run(&dir.join("image.clrprof"), false);
    let importer = run(&dir.join("importer.clrprof"), true);
    // Per (module, token): what each run called it, one entry per instantiation of a generic.
    type Named = BTreeMap<(String, u64), BTreeMap<String, Vec<String>>>;
    let keyed = |v: &serde_json::Value, table: &str, fields: &[&str]| -> Named {
        let mut m = Named::new();
        for x in v[table].as_array().unwrap() {
            let key = (x["module"].as_str().unwrap_or_default().to_string(), x["token"].as_u64().unwrap_or(0));
            let values = fields.iter().map(|f| x[*f].to_string()).collect();
            m.entry(key).or_default().insert(x["name"].to_string(), values);
        }
        m
    };
    for (table, fields) in [("functions", &["signature", "class"][..]), ("classes", &[][..])] {
        let (a, b) = (keyed(&image, table, fields), keyed(&importer, table, fields));
        let common: Vec<_> = a.keys().filter(|k| b.contains_key(*k)).collect();
        assert!(
            common.len() * 10 >= a.len().max(b.len()) * 9,
            "{table}: {} of {} / {}",
            common.len(),
            a.len(),
            b.len()
        );
        assert!(common.len() > 500, "{table}: only {} named in both", common.len());
        for k in common {
            let (x, y) = (&a[k], &b[k]);
            if x.len() == 1 && y.len() == 1 {
                assert_eq!(x, y, "{table} {k:?}");
                continue;
            }
            // A generic: the instantiations each run happened to load may differ; those in both agree.
            let shared: Vec<_> = x.keys().filter(|n| y.contains_key(*n)).collect();
            assert!(!shared.is_empty(), "{table} {k:?}: {x:?} / {y:?}");
            for n in shared {
                assert_eq!(x[n], y[n], "{table} {k:?} {n}");
            }
        }
    }
}
