//! The corpus's async web program: `apps/WebEf`, an ASP.NET Core minimal API over EF Core + SQLite
//! (NuGet's Microsoft.EntityFrameworkCore.Sqlite), seeded at start, that sends itself a fixed number
//! of requests on loopback and prints its own counters. Recorded as a user would, its figures are
//! checked against the app's: handler calls counted exactly under `--instrument --include`, the
//! runtime's GC counts, and the sampled CPU against the process's own user+sys time; no frame is
//! left unnamed.

use crate::common::*;

use std::collections::HashMap;

use serde_json::Value;

const REQUESTS: u64 = 2000;
/// apps/WebEf's seed: 2,000 orders over 50 customers, 40 each.
const ORDERS_PER_CUSTOMER: u64 = 40;

/// The app's `key=value` lines, after checking it exited 0 with every answer right.
fn counters(out: &std::process::Output) -> HashMap<String, u64> {
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "exit {:?}\n{stdout}\n{}", out.status, text(&out.stderr));
    let c: HashMap<String, u64> = stdout
        .lines()
        .filter_map(|l| l.split_once('='))
        .filter_map(|(k, v)| Some((k.to_string(), v.trim().parse().ok()?)))
        .collect();
    assert_eq!(c.get("requests"), Some(&REQUESTS), "{stdout}");
    assert_eq!(c.get("failures"), Some(&0), "{stdout}");
    assert_eq!(c["product"] + c["recent"] + c["total"], REQUESTS, "{stdout}");
    c
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn async_web_service_sampled_figures_match_the_process() {
    let _machine = machine::shared();
    let dir = scratch("corpus-web-sampled");
    let trace = dir.join("web.clrprof");
    let out = record("WebEf", &[&REQUESTS.to_string()], &trace, &[]);
    let c = counters(&out);
    let v = report_json(&trace);

    // Every sampled frame is named: no `<function 0x…>` row in the report or the stacks.
    let unnamed: Vec<&str> = v["functions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["name"].as_str())
        .filter(|n| n.contains("<function 0x"))
        .collect();
    assert!(unnamed.is_empty(), "{unnamed:?}");
    let folded = export(&trace, &["--format", "collapsed", "-o", "-"]);
    assert!(folded.status.success(), "{}", text(&folded.stderr));
    let folded = text(&folded.stdout);
    assert!(!folded.is_empty());
    assert!(!folded.contains("<function 0x"), "{}", folded.lines().find(|l| l.contains("<function 0x")).unwrap());

    // The runtime's own GC counts (GC.CollectionCount, read after the load) are the report's.
    let gc = &v["gc_totals"];
    let per: Vec<u64> = gc["per_generation"].as_array().unwrap().iter().map(u).collect();
    assert_eq!(u(&gc["count"]), c["gc0"], "GCs: {gc}");
    assert_eq!(per[1] + per[2], c["gc1"], "gen1+ GCs: {gc}");
    assert_eq!(per[2], c["gc2"], "gen2 GCs: {gc}");

    // Sampled CPU against the process's user+sys CPU (all threads, read by the app at its end) less
    // the agent's sampler thread, which is not sampled. CPU timers fire at kernel ticks, so a
    // thread's time since its last sample is not counted (up to one period per thread, and before
    // the agent's timers exist); the sample never stands for more than the thread ran. Measured
    // 0.92-0.94 on an idle and a loaded machine.
    let process_ms = (c["cpu_user_ms"] + c["cpu_sys_ms"]) as f64;
    let sampler_ms = u(&v["sampling"]["sampler_cpu_ns"]) as f64 / 1e6;
    let sampled_ms = u(&v["sampling"]["cpu_ns"]) as f64 / 1e6;
    let ratio = sampled_ms / (process_ms - sampler_ms);
    assert!(
        (0.85..=1.05).contains(&ratio),
        "sampled {sampled_ms:.0} ms of CPU for {process_ms:.0} ms user+sys less the sampler's {sampler_ms:.0} ms: {ratio:.3}"
    );
}

#[test]
fn async_web_service_handlers_are_counted_exactly() {
    let _machine = machine::shared();
    let dir = scratch("corpus-web-instrumented");
    let trace = dir.join("web.clrprof");
    let out = record("WebEf", &[&REQUESTS.to_string()], &trace, &["--instrument", "--include", "Handlers"]);
    let c = counters(&out);
    let v = report_json(&trace);
    let calls = |name: &str| u(&find(&v, "functions", name)["calls"]);
    // One call of each async handler per request it served, by the app's own count.
    assert_eq!(calls("Handlers.Product"), c["product"]);
    assert_eq!(calls("Handlers.RecentOrders"), c["recent"]);
    assert_eq!(calls("Handlers.CustomerTotal"), c["total"]);
    // The sum's lambda runs once per order row the query returned: 40 per customer.
    assert_eq!(calls("Handlers+<>c.<CustomerTotal>b__5_0"), c["total"] * ORDERS_PER_CUSTOMER);
    let messages = v["messages"].as_array().unwrap();
    assert!(messages.iter().all(|m| !m.as_str().unwrap_or("").contains("dropped")), "{messages:?}");
}
