//! End to end: the agent loads into .NET, streams a trace, and `clrprof report` prints the
//! General Code Profiler's tables with exact names.

mod common;
use common::*;

#[test]
fn types_app_classes_and_functions_are_named_exactly() {
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
