//! End to end: exact call counts and timings from enter/leave hooks (`record --instrument`),
//! the hot spots, call tree, callers, summary and flow views, filters, and proof that the
//! hooks preserve every register the JIT relies on.

use crate::common::*;

use serde_json::Value;

fn func<'a>(v: &'a Value, name: &str) -> &'a Value {
    find(v, "functions", name)
}

/// Checks the JSON call tree (a flat list with parent ids, depth first): inclusive ≥ exclusive ≥ 0
/// and inclusive = exclusive + the children's inclusive for every node.
fn check_tree(nodes: &[Value]) {
    let mut children_sum = vec![0u64; nodes.len()];
    for (i, node) in nodes.iter().enumerate() {
        assert_eq!(node["id"].as_u64(), Some(i as u64));
        if let Some(parent) = node["parent"].as_u64() {
            assert!((parent as usize) < i, "a parent comes before its children");
            assert_eq!(node["depth"].as_u64().unwrap(), nodes[parent as usize]["depth"].as_u64().unwrap() + 1);
            children_sum[parent as usize] += node["inclusive_ns"].as_u64().unwrap();
        } else {
            assert_eq!(node["depth"], 0);
        }
    }
    for (node, sum) in nodes.iter().zip(children_sum) {
        let inc = node["inclusive_ns"].as_u64().unwrap();
        let exc = node["exclusive_ns"].as_u64().unwrap();
        assert!(inc >= exc, "{}: inclusive {inc} < exclusive {exc}", node["name"]);
        assert_eq!(inc, exc + sum, "{}: inclusive = exclusive + children", node["name"]);
    }
}

#[test]
fn exact_counts_and_consistent_times_on_every_scenario() {
    let _machine = machine::shared();
    let dir = scratch("instrument-all");
    let trace = dir.join("calls.clrprof");
    let plain = run_plain("Calls", &[]);
    let out = record("Calls", &[], &trace, &["--instrument"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // The hooks preserve arguments and return values: ints, doubles, floats, structs passed on
    // the stack, 16-byte structs returned in two registers.
    assert_eq!(text(&out.stdout), text(&plain.stdout));
    assert!(text(&out.stdout).contains("args: 1340 4.5,3.75 15,1.5 7,8,9,3.5 42,1.5"));

    let v = report_json_per_thread(&trace);
    check_calls_app(&v);
    for f in v["functions"].as_array().unwrap() {
        if let (Some(i), Some(e)) = (f["inclusive_ns"].as_u64(), f["exclusive_ns"].as_u64()) {
            assert_eq!(f["callee_ns"].as_u64().unwrap(), i - e);
        }
    }
    assert_eq!(v["schema_version"], 3);
    check_tree(v["calltree"].as_array().unwrap());
    let instr = &v["instrumentation"];
    assert_eq!(instr["inlining_disabled"], true);
    assert_eq!(instr["ready_to_run_ignored"], true);
    assert_eq!(instr["profiler_time_subtracted"], true);
    assert!(instr["hooked_functions"].as_u64().unwrap() > 100);

    // Text views agree with the JSON.
    let hs = text(&report(&trace, &["--view", "hotspots"]).stdout);
    assert!(hs.contains("weight: time — exact, from enter/leave hooks; inlining disabled"), "{hs}");
    assert!(hs.contains("ReadyToRun code ignored"));
    assert!(hs.contains("profiler time subtracted"));
    let fib_line = hs.lines().find(|l| l.trim_end().ends_with(" Calls.Recursion.Fib")).unwrap();
    assert_eq!(fib_line.split_whitespace().next(), Some("21891"));

    let tree = text(&report(&trace, &["--view", "calltree", "--depth", "10"]).stdout);
    let line = tree.lines().find(|l| l.trim_end().ends_with("Calls.Exceptions.Level3")).expect("Level3 in tree");
    assert!(line.contains(" 50 "), "{line}");

    let callers = report(&trace, &["--view", "callers", "--function", "Calls.Recursion.Fib"]);
    let c = text(&callers.stdout);
    assert!(callers.status.success(), "{}", text(&callers.stderr));
    assert!(c.contains("calls 21891"), "{c}");
    let rec = c
        .lines()
        .find(|l| l.contains("Calls.Recursion.Fib") && l.trim_start().starts_with("21890"))
        .expect("21890 recursive calls");
    assert!(rec.contains("Calls.Recursion.Fib"));
    assert!(c.contains("ENTRY POINTS"));
    assert!(c.lines().any(|l| l.trim_start().starts_with("1 ") && l.contains("Calls.Program.<Main>")), "{c}");

    let summary = text(&report(&trace, &["--view", "summary"]).stdout);
    assert!(
        summary
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["10000", "Calls.dll", "Calls.Shared.Work"]),
        "{summary}"
    );

    // HST's spreadsheet layout.
    let csv = text(&report(&trace, &["--view", "hotspots", "--format", "csv", "--by-thread"]).stdout);
    let mut lines = csv.lines();
    assert_eq!(
        lines.next(),
        Some("Thread ID;Function;Times Called;Exclusive Time;Inclusive Time;Callee Time;Suspended Time;Profiler Time")
    );
    let work_rows: Vec<&str> = csv.lines().filter(|l| l.contains(";Calls.Shared.Work;")).collect();
    assert_eq!(work_rows.len(), 4);
    for r in work_rows {
        let f: Vec<&str> = r.split(';').collect();
        assert_eq!(f.len(), 8);
        assert_eq!(f[2], "2500");
        assert!(f[3].contains('.') && !f[3].contains(','), "decimal point: {r}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn filters_decide_what_gets_hooks() {
    let _machine = machine::shared();
    let dir = scratch("instrument-filter");
    let trace = dir.join("f.clrprof");
    let out = record(
        "Calls",
        &["fib"],
        &trace,
        &["--instrument", "--include", "Calls.Recursion", "--include", "Calls.Program*"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v = report_json(&trace);
    assert_eq!(calls(&v, "Calls.Recursion.Fib"), 21891);
    let with_calls = names_with_calls(&v);
    assert!(
        with_calls.iter().all(|n| n.starts_with("Calls.Recursion") || n.starts_with("Calls.Program")),
        "{with_calls:?}"
    );
    assert!(v["instrumentation"]["filtered_functions"].as_u64().unwrap() > 0);
    assert_eq!(v["instrumentation"]["include"], serde_json::json!(["Calls.Recursion", "Calls.Program*"]));

    let trace2 = dir.join("g.clrprof");
    let out = record(
        "Calls",
        &["counted"],
        &trace2,
        &["--instrument", "--exclude", "System.*", "--exclude", "Calls.Counted.Tick"],
    );
    assert!(out.status.success());
    let v = report_json(&trace2);
    assert_eq!(calls(&v, "Calls.Counted.Run"), 1);
    assert_eq!(func(&v, "Calls.Counted.Tick")["calls"], 0, "excluded functions get no hooks");
    assert!(v["functions"]
        .as_array()
        .unwrap()
        .iter()
        .all(|f| !(f["name"].as_str().unwrap().starts_with("System.") && f["calls"].as_u64().unwrap_or(0) > 0)));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn counts_only_and_flow_modes() {
    let _machine = machine::shared();
    let dir = scratch("instrument-modes");
    let trace = dir.join("c.clrprof");
    let out = record("Calls", &["fib"], &trace, &["--instrument", "--counts-only"]);
    assert!(out.status.success());
    let v = report_json(&trace);
    assert_eq!(calls(&v, "Calls.Recursion.Fib"), 21891);
    assert_eq!(func(&v, "Calls.Recursion.Fib")["inclusive_ns"], 0);
    assert_eq!(v["instrumentation"]["counts_only"], true);
    let hs = text(&report(&trace, &["--view", "hotspots"]).stdout);
    assert!(hs.contains("weight: calls"), "counts-only traces rank by calls: {hs}");

    // The counts-only fast path (enter/leave handled in the stubs) stays exact through
    // exceptions that unwind frames without leave hooks.
    let trace = dir.join("cx.clrprof");
    let out = record("Calls", &["exceptions"], &trace, &["--instrument", "--counts-only"]);
    assert!(out.status.success());
    let v = report_json(&trace);
    for f in ["Calls.Exceptions.Level1", "Calls.Exceptions.Level2", "Calls.Exceptions.Level3"] {
        assert_eq!(calls(&v, f), 50, "{f}");
    }
    let tree = text(&report(&trace, &["--view", "calltree", "--depth", "12"]).stdout);
    let indent = |name: &str| {
        let l = tree.lines().find(|l| l.trim_end().ends_with(name)).unwrap_or_else(|| panic!("{name} in {tree}"));
        l.rfind(name).unwrap()
    };
    assert!(indent("Calls.Exceptions.Level1") < indent("Calls.Exceptions.Level3"), "nested, not flattened");

    let trace = dir.join("flow.clrprof");
    let out = record("Calls", &["counted"], &trace, &["--instrument", "--flow", "--include", "Calls.Counted"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v = report_json(&trace);
    let flow = v["flow"].as_array().unwrap();
    let events: Vec<&Value> = flow.iter().flat_map(|t| t["events"].as_array().unwrap()).collect();
    let enters = events.iter().filter(|e| e["kind"] == "enter" && e["function"] == "Calls.Counted.Tick").count();
    let leaves = events.iter().filter(|e| e["kind"] == "leave" && e["function"] == "Calls.Counted.Tick").count();
    assert_eq!((enters, leaves), (1000, 1000));
    // Timestamps never go backwards within a thread, and nesting is balanced.
    for t in flow {
        let ev = t["events"].as_array().unwrap();
        let mut depth: i64 = 0;
        let mut last = 0;
        for e in ev {
            let ts = e["ts_ns"].as_u64().unwrap();
            assert!(ts >= last);
            last = ts;
            depth += if e["kind"] == "enter" { 1 } else { -1 };
            assert!(depth >= 0);
        }
        assert_eq!(depth, 0, "balanced");
    }
    let text_flow = text(&report(&trace, &["--view", "flow"]).stdout);
    assert!(text_flow.contains("> Calls.Counted.Run"));
    assert!(text_flow.contains("  > Calls.Counted.Tick"), "nested one level under Run");
    assert!(text_flow.contains("  < Calls.Counted.Tick"));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn keep_inlining_is_reported_and_flags_need_instrument() {
    let _machine = machine::shared();
    let dir = scratch("instrument-inline");
    let trace = dir.join("i.clrprof");
    let out = record("Calls", &["counted"], &trace, &["--instrument", "--keep-inlining"]);
    assert!(out.status.success());
    let hs = text(&report(&trace, &["--view", "hotspots"]).stdout);
    assert!(hs.contains("inlining enabled (inlined calls are not seen)"), "{hs}");
    let v = report_json(&trace);
    assert_eq!(v["instrumentation"]["inlining_disabled"], false);
    // `Tick` is marked NoInlining, so it is still counted exactly.
    assert_eq!(calls(&v, "Calls.Counted.Tick"), 1000);

    let out = record("Calls", &["counted"], &dir.join("x.clrprof"), &["--flow"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--instrument"), "{}", text(&out.stderr));
    let _ = std::fs::remove_dir_all(dir);
}

/// The churn mode's peak resident set (kB), from its output.
fn peak_rss_kb(out: &std::process::Output) -> u64 {
    let s = text(&out.stdout);
    let v = s.split("peak_rss_kb=").nth(1).unwrap_or_else(|| panic!("no peak_rss_kb in {s}"));
    v.trim().parse().unwrap_or_else(|_| panic!("bad peak_rss_kb in {s}"))
}

/// Thread churn in one run: 20,000 short-lived threads, 50 at a time, each calling `Work` 10
/// times. Every thread is instrumented (more than the agent's 16,384 thread slots, which are
/// reused as threads end), every call is counted exactly once, and each thread's own tree has
/// its entry once and `Work` 10 times. Memory follows the threads alive at once, not the
/// threads ever seen: the peak with 20,000 threads stays near the peak with 1,000.
#[test]
fn thread_churn_is_counted_exactly_with_bounded_memory() {
    let _machine = machine::shared();
    let dir = scratch("instrument-churn");
    let (threads, calls_each) = (20_000u64, 10u64);
    let trace = dir.join("churn.clrprof");
    let out = record("Calls", &["churn", "20000", "50", "10"], &trace, &["--instrument", "--counts-only"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with(&format!("churn: {} ", threads * 9)), "{}", text(&out.stdout));
    let peak_many = peak_rss_kb(&out);

    let v = report_json_per_thread(&trace);
    assert_eq!(calls(&v, "Calls.Churn.Work"), threads * calls_each);
    assert_eq!(calls(&v, "Calls.Churn.Entry"), threads);
    assert_eq!(calls(&v, "Calls.Churn.Run"), 1);
    let messages = v["messages"].as_array().unwrap();
    assert!(messages.iter().all(|m| !m.as_str().unwrap_or("").contains("could not be placed")), "{messages:?}");
    // Per thread: the entry once and Work 10 times (threads whose kernel tid was reused by a
    // later thread show up together, their counts added).
    let mut entries = 0;
    for t in v["thread_hotspots"].as_array().unwrap() {
        let count = |name: &str| {
            t["functions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|f| f["name"] == name)
                .map_or(0, |f| f["calls"].as_u64().unwrap())
        };
        let e = count("Calls.Churn.Entry");
        assert_eq!(count("Calls.Churn.Work"), e * calls_each, "{}", t["os_tid"]);
        entries += e;
    }
    assert_eq!(entries, threads);
    let summary = text(&report(&trace, &["--view", "summary"]).stdout);
    assert!(
        summary
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["200000", "Calls.dll", "Calls.Churn.Work"]),
        "{summary}"
    );

    // The same with 1,000 threads. In timing mode a run takes about 42 MB with 1,000 threads and
    // 79 MB with 20,000: the runtime alone grows as much (33 → 76 MB without the profiler). An agent
    // that keeps a thread's state for every thread ever seen costs 330 kB each (345 MB with 1,000,
    // 1.6 GB with 5,000); 192 MB is 600 threads' worth of that state.
    let out =
        record("Calls", &["churn", "1000", "50", "10"], &dir.join("few.clrprof"), &["--instrument", "--counts-only"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let peak_few = peak_rss_kb(&out);
    assert!(
        peak_many < peak_few + 192 * 1024,
        "peak RSS {peak_many} kB with 20,000 threads, {peak_few} kB with 1,000: per-thread state is not reused"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// A row of a text call tree: its share as printed, its calls, its function, the whole line, and
/// the row without the columns' padding (which follows the widest value shown).
struct TreeRow<'a> {
    percent: &'a str,
    calls: u64,
    name: &'a str,
    line: &'a str,
    key: String,
}

/// The rows of a one-group text call tree, and its footer (hidden rows, their time as printed).
fn tree_rows(t: &str) -> (Vec<TreeRow<'_>>, Option<(usize, String)>) {
    let mut lines = t.lines().skip_while(|l| !l.trim_start().starts_with("INCL %")).skip(1);
    let mut rows = Vec::new();
    let mut footer = None;
    for line in lines.by_ref() {
        if line.trim().is_empty() {
            break;
        }
        if let Some((count, rest)) = line.split_once(" below 0.05% hidden: ") {
            let count = count.trim_end_matches(" rows").trim_end_matches(" row").parse().unwrap();
            footer = Some((count, rest.split_once(" ms,").expect("a time in ms").0.to_string()));
            assert!(line.ends_with("; --min-percent 0 shows them"), "{line}");
            continue;
        }
        // INCL %, INCL ms, EXCL ms, CALLS, then the indented function (which may hold spaces).
        let mut rest = line;
        let mut fields = Vec::new();
        for _ in 0..4 {
            rest = rest.trim_start();
            let end = rest.find(' ').unwrap();
            fields.push(&rest[..end]);
            rest = &rest[end..];
        }
        // `rest` is the two spaces between columns, the indentation and the function.
        let key = format!("{}{rest}", fields.join(" "));
        rows.push(TreeRow { percent: fields[0], calls: fields[3].parse().unwrap(), name: rest.trim(), line, key });
    }
    assert!(lines.next().is_none(), "one group: {t}");
    (rows, footer)
}

/// `report --view calltree` of an instrumented trace reads like an exact tree: no rows of the
/// trace's sampled stacks, the rows that would read 0.0% hidden with a footer counting them and
/// their time (which their callers still include), and the exact counts as they were.
#[test]
fn the_exact_call_tree_hides_zero_rows_and_leaves_sampled_rows_out() {
    let _machine = machine::shared();
    let dir = scratch("instrument-calltree");
    let trace = dir.join("calls.clrprof");
    let out = record("Calls", &[], &trace, &["--instrument"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let calltree = |extra: &[&str]| {
        let out = report(&trace, &[&["--view", "calltree"], extra].concat());
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout)
    };

    // The trace has sampled stacks, with their markers ([runtime], [thread not walkable], …).
    let wall = calltree(&["--weight", "wall", "--min-percent", "0"]);
    let (wall_rows, _) = tree_rows(&wall);
    assert!(wall_rows.iter().any(|r| r.name.starts_with('[')), "sampled markers in the wall tree: {wall}");

    // The whole exact tree: every row entered at least once, no sampled marker.
    let full = calltree(&["--min-percent", "0"]);
    let (all, none) = tree_rows(&full);
    assert!(none.is_none(), "--min-percent 0 hides nothing");
    assert!(all.len() > 1000, "{} rows", all.len());
    for r in &all {
        assert!(r.calls > 0 && !r.name.starts_with('['), "a row the hooks never saw: {}", r.line);
    }
    let zero = all.iter().filter(|r| r.percent == "0.0").count();
    assert!(zero > all.len() / 2, "{zero} of {} rows read 0.0%", all.len());

    // By default: the rows that read 0.0% hidden and counted, every other row as it was.
    let cut = calltree(&[]);
    let (shown, footer) = tree_rows(&cut);
    let (hidden, hidden_ms) = footer.expect("a footer");
    assert_eq!(hidden, zero, "{cut}");
    let kept: Vec<&str> = all.iter().filter(|r| r.percent != "0.0").map(|r| r.key.as_str()).collect();
    assert_eq!(shown.iter().map(|r| r.key.as_str()).collect::<Vec<_>>(), kept);

    // The same as deep as --depth shows.
    let (deep_full, deep_cut) = (calltree(&["--depth", "6", "--min-percent", "0"]), calltree(&["--depth", "6"]));
    let ((deep_all, _), (deep_shown, deep_footer)) = (tree_rows(&deep_full), tree_rows(&deep_cut));
    let deep_zero = deep_all.iter().filter(|r| r.percent == "0.0").count();
    assert_eq!(deep_footer.expect("a footer at depth 6").0, deep_zero);
    assert_eq!(deep_shown.len() + deep_zero, deep_all.len());

    // The JSON keeps every exact row; with --min-percent it cuts the same rows and says what
    // they hold, time its callers still count.
    let whole = report_json(&trace);
    let nodes = whole["calltree"].as_array().unwrap();
    assert_eq!(nodes.len(), all.len());
    assert!(whole.get("calltree_hidden").is_none());
    let v = report_json_with(&trace, &["--min-percent", "0.05"]);
    let h = &v["calltree_hidden"];
    assert_eq!(h["rows"].as_u64(), Some(hidden as u64));
    let hidden_ns = h["inclusive_ns"].as_u64().unwrap();
    assert_eq!(format!("{}.{:03}", hidden_ns / 1_000_000, (hidden_ns / 1_000) % 1_000), hidden_ms);
    let shown_nodes = v["calltree"].as_array().unwrap();
    assert_eq!(shown_nodes.len(), shown.len());
    let ns = |n: &Value, k: &str| n[k].as_u64().unwrap();
    let roots = |ns: &[Value]| {
        ns.iter().filter(|n| n["parent"].is_null()).map(|n| n["inclusive_ns"].as_u64().unwrap()).sum::<u64>()
    };
    let mut unlisted = roots(nodes) - roots(shown_nodes);
    let mut children = vec![0u64; shown_nodes.len()];
    for n in shown_nodes {
        if let Some(p) = n["parent"].as_u64() {
            children[p as usize] += ns(n, "inclusive_ns");
        }
    }
    for (n, c) in shown_nodes.iter().zip(children) {
        unlisted += ns(n, "inclusive_ns") - ns(n, "exclusive_ns") - c;
    }
    assert_eq!(unlisted, hidden_ns, "the hidden rows' time is in their callers' inclusive time");

    // Exact counts: the tree's rows of a function add up to its calls, hidden rows included.
    for (f, n) in [
        ("Calls.Recursion.Fib", 21_891),
        ("Calls.Shared.Work", 10_000),
        ("Calls.Counted.Tick", 1000),
        ("Calls.Exceptions.Level3", 50),
        ("Calls.AsyncWork.Step", 10),
    ] {
        assert_eq!(calls(&whole, f), n, "{f}");
        assert_eq!(all.iter().filter(|r| r.name == f).map(|r| r.calls).sum::<u64>(), n, "{f}");
    }
    let fib = shown.iter().find(|r| r.name == "Calls.Recursion.Fib").expect("Fib's root shown");
    assert_eq!(fib.calls, 1);
    let _ = std::fs::remove_dir_all(dir);
}
