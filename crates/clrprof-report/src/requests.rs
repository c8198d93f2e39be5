//! `--view requests`: ASP.NET Core requests per endpoint (route) with exact counts and latency
//! percentiles, the slowest requests, waits on wait handles by waiting site with their stacks,
//! and the thread pool's workers with a note when it starved (`record --async`).

use clrprof_model::Profile;
use clrprof_query::requests::requests;

use super::text_table::{Align::*, TextTable};
use super::{ms, title};

pub fn render(p: &Profile, top: Option<usize>) -> String {
    let mut out = title(p, "requests");
    let d = requests(p, top.unwrap_or(10));
    if !d.recorded {
        out += "\nno requests, waits or thread-pool events in this trace: record with --async (CLRPROF_ASYNC=1)\n";
        return out;
    }
    let total: u64 = d.endpoints.iter().map(|e| e.count).sum();
    let unfinished: u64 = d.endpoints.iter().map(|e| e.unfinished).sum();
    out += &format!("\n{total} requests ended");
    if unfinished > 0 {
        out += &format!(", {unfinished} still running when the trace ended");
    }
    if d.unmatched_stops > 0 {
        out += &format!(", {} ends of requests started before recording", d.unmatched_stops);
    }
    out += if d.cpu.is_some() {
        " (latency: the runtime's RequestStart to RequestStop; percentiles nearest-rank; CPU, BLOCKED, AWAITING: \
            the requests' time by the activity ids of their CPU samples, waits and awaits, summed; `-` where the trace \
            cannot tell)\n"
    } else {
        " (latency: the runtime's RequestStart to RequestStop; percentiles nearest-rank; CPU, BLOCKED, AWAITING: \
            the requests' time by the activity ids of their waits and awaits, summed; `-` where the trace cannot tell, \
            as CPU always: samples name no request)\n"
    };
    let mut t = TextTable::new(&[
        ("COUNT", Right),
        ("P50 ms", Right),
        ("P95 ms", Right),
        ("P99 ms", Right),
        ("MAX ms", Right),
        ("TOTAL ms", Right),
        ("CPU ms", Right),
        ("BLOCKED ms", Right),
        ("AWAITING ms", Right),
        ("STATUS", Left),
        ("ENDPOINT", Left),
    ]);
    let opt = |v: Option<u64>| v.map(ms).unwrap_or_else(|| "-".into());
    for e in &d.endpoints {
        let statuses: Vec<String> =
            e.statuses.iter().map(|(c, n)| if *c == 0 { format!("?×{n}") } else { format!("{c}×{n}") }).collect();
        t.row(vec![
            e.count.to_string(),
            ms(e.p50_ns),
            ms(e.p95_ns),
            ms(e.p99_ns),
            ms(e.max_ns),
            ms(e.total_ns),
            opt(e.cpu_ns),
            opt(e.blocked_ns),
            opt(e.awaiting_ns),
            statuses.join(" "),
            e.endpoint.clone(),
        ]);
    }
    if !d.endpoints.is_empty() {
        out += &t.render();
    }
    if !d.slowest.is_empty() {
        out += &format!("\nslowest {} requests\n", d.slowest.len());
        let mut t = TextTable::new(&[
            ("LATENCY ms", Right),
            ("START ms", Right),
            ("OS TID", Right),
            ("STATUS", Right),
            ("PATH", Left),
            ("ENDPOINT", Left),
        ]);
        for r in &d.slowest {
            t.row(vec![
                ms(r.latency_ns),
                ms(r.start_ns),
                r.os_tid.to_string(),
                if r.status == 0 { "-".into() } else { r.status.to_string() },
                r.path.clone(),
                r.endpoint.clone(),
            ]);
        }
        out += &t.render();
        for r in d.slowest.iter().filter(|r| !r.top_stacks.is_empty()) {
            out += &format!(
                "\n{} {} at {} ms: {} ms of CPU, top stacks:\n",
                r.endpoint,
                r.path,
                ms(r.start_ns),
                ms(r.cpu_ns.unwrap_or(0))
            );
            for s in &r.top_stacks {
                out += &format!("  {} ms ({} samples):\n", ms(s.cpu_ns), s.samples);
                for f in &s.stack {
                    out += &format!("    {f}\n");
                }
            }
        }
    }
    if let Some(c) = &d.cpu {
        out += &format!(
            "\nCPU samples: {} ms ({} samples) in requests, {} ms ({} samples) in no request (no activity id, or \
             not a request's)\n",
            ms(c.in_requests_ns),
            c.in_requests_samples,
            ms(c.outside_ns),
            c.outside_samples
        );
    }
    out += &format!(
        "\n{} waits on wait handles, {} ms waited in all{}\n",
        d.waits,
        ms(d.wait_ns),
        if d.open_waits > 0 { format!(" ({} still waiting at the end)", d.open_waits) } else { String::new() }
    );
    if d.unattributed_waits > 0 {
        out += &format!(
            "{} of them ({} ms) named no request running at the time (no activity id, or not a request's): not in \
             any endpoint's BLOCKED\n",
            d.unattributed_waits,
            ms(d.unattributed_wait_ns)
        );
    }
    out +=
        "COVERS blocking waits the runtime reports (WaitHandleWaitStart/Stop, .NET 9 and later): Task.Wait, .Result, \
            Monitor.Wait, SemaphoreSlim.Wait, WaitHandle.WaitOne…\n";
    if !d.wait_sites.is_empty() {
        let mut t = TextTable::new(&[
            ("COUNT", Right),
            ("WAIT ms", Right),
            ("LONGEST ms", Right),
            ("KIND", Left),
            ("WAITING IN", Left),
        ]);
        for s in &d.wait_sites {
            t.row(vec![s.count.to_string(), ms(s.wait_ns), ms(s.max_wait_ns), s.kind.to_string(), s.site.clone()]);
        }
        out += &t.render();
        for s in &d.wait_sites {
            if !s.stack.is_empty() {
                out += &format!("\n{} ({}) — waiting stack ({} of {}):\n", s.site, s.kind, s.stack_count, s.count);
                for f in &s.stack {
                    out += &format!("    {f}\n");
                }
            }
        }
    }
    let pool = &d.pool;
    out += &format!(
        "\nthread pool: at most {} worker threads active, {} adjustments ({} for starvation, {} for blocked threads)\n",
        pool.max_workers,
        pool.adjustments.len(),
        pool.starvation_injections,
        pool.blocking_injections
    );
    if let Some(n) = &pool.note {
        out += &format!("note: {n}\n");
    }
    out
}
