//! The requests view (`report --view requests`, the viewer's requests view, the report
//! document's `requests`): per endpoint (route), the exact request count and latency
//! percentiles from the runtime's own start and stop times; the slowest requests; the threads'
//! waits on wait handles by waiting site with their stacks; the thread pool's workers over time
//! and a note when it injected threads because work waited (starvation) or because its threads
//! blocked (cooperative blocking).
//!
//! Percentiles are nearest-rank (the smallest latency with at least p% of the requests at or
//! below it): every figure is one request's real latency.

use clrprof_model::requests::{Request, RequestIndex, Requests};
use clrprof_model::Profile;
use clrprof_trace::pool_reason;
use serde::Serialize;

/// One endpoint's requests (those that ended; unfinished ones are counted apart).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct EndpointRow {
    /// The route (`GET /items/{id:int}`) when ASP.NET Core's log named it, else method and path.
    pub endpoint: String,
    /// Requests that started in the range and ended.
    pub count: u64,
    /// Requests that started in the range and had not ended when the trace ended.
    pub unfinished: u64,
    pub p50_ns: u64,
    pub p95_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    /// Sum of the latencies.
    pub total_ns: u64,
    /// The requests' time on CPU, blocked on wait handles and awaiting, summed over the endpoint's
    /// requests (`split`): `null` where unknown — `cpu_ns` where the CPU samples carry no
    /// activity id (older traces, or the agent did not find where the runtime keeps it: see
    /// `crate::request_cpu`), all three without task events (`--async`), `blocked_ns` where the
    /// runtime reports no waits (.NET 8) or the waits carry no activity ids (older traces).
    pub cpu_ns: Option<u64>,
    pub blocked_ns: Option<u64>,
    pub awaiting_ns: Option<u64>,
    /// Response status codes with their counts (code 0: not logged), by code.
    pub statuses: Vec<(u32, u64)>,
}

/// One of the slowest requests.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SlowRequest {
    pub endpoint: String,
    pub method: String,
    pub path: String,
    pub status: u32,
    pub start_ns: u64,
    pub latency_ns: u64,
    /// The thread that took the request.
    pub os_tid: u32,
    /// The EventSource activity id (hex).
    pub activity: String,
    /// Its CPU time from the CPU samples that carried its activity id (`null` where samples carry
    /// none), and its stacks by CPU time, most first (at most [`TOP_STACKS`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_ns: Option<u64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub top_stacks: Vec<crate::request_cpu::RequestStack>,
}

/// Most stacks listed for each of the slowest requests.
pub const TOP_STACKS: usize = 3;

/// Waits on wait handles at one site.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct WaitSiteRow {
    /// The innermost frame outside `System.Threading`.
    pub site: String,
    /// "Monitor.Wait" (`Task.Wait` and `.Result` block in one) or "wait" (a wait handle, a
    /// contended lock…), as the runtime says.
    pub kind: &'static str,
    pub count: u64,
    pub wait_ns: u64,
    pub max_wait_ns: u64,
    /// The most frequent waiting stack, innermost frame first, and how many waits had it.
    pub stack: Vec<String>,
    pub stack_count: u64,
}

/// The thread pool's workers.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct PoolDoc {
    /// Active workers after each start or stop: (ns, workers).
    pub workers: Vec<(u64, u32)>,
    pub max_workers: u32,
    /// The pool's adjustments: (ns, new target, reason name).
    pub adjustments: Vec<(u64, u32, &'static str)>,
    /// Adjustments that raised the target for starvation (work waited in the queue, no thread
    /// took it).
    pub starvation_injections: u64,
    /// Adjustments that raised the target because pool threads blocked (`Task.Wait`, `.Result` on a pool thread).
    pub blocking_injections: u64,
    /// Set when the pool injected threads while work waited: what to tell the user.
    pub note: Option<String>,
}

/// Everything the requests view shows.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RequestsDoc {
    /// The trace was recorded with `--async` (request, wait or pool records present).
    pub recorded: bool,
    /// Endpoints, most total latency first.
    pub endpoints: Vec<EndpointRow>,
    /// The slowest requests, slowest first.
    pub slowest: Vec<SlowRequest>,
    /// Request ends whose start the trace does not hold.
    pub unmatched_stops: u64,
    /// Waits on wait handles (.NET 9 and later): how many ended, their total, by site.
    pub waits: u64,
    pub wait_ns: u64,
    pub wait_sites: Vec<WaitSiteRow>,
    /// Waits open when the trace ended.
    pub open_waits: u64,
    /// Ended waits no request is named for (no activity id, or none of a request running at the
    /// wait's start: the server's own threads, the app's startup…), and their total: time left out
    /// of every endpoint's blocked time (0 without task events).
    pub unattributed_waits: u64,
    pub unattributed_wait_ns: u64,
    pub pool: PoolDoc,
    /// The CPU samples by request (`None` where samples carry no activity id).
    pub cpu: Option<crate::request_cpu::CpuSplit>,
}

/// The report document's part (keys `requests`, `slowest_requests`, `unmatched_request_stops`,
/// `waits`, `thread_pool`), present only for a trace recorded with `--async`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RequestsSection {
    pub requests: Vec<EndpointRow>,
    pub slowest_requests: Vec<SlowRequest>,
    pub unmatched_request_stops: u64,
    pub waits: WaitsDoc,
    pub thread_pool: PoolDoc,
    /// CPU samples in requests and outside them (only when samples carry activity ids).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_cpu: Option<crate::request_cpu::CpuSplit>,
}

/// Waits on wait handles (.NET 9 and later).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct WaitsDoc {
    pub count: u64,
    pub wait_ns: u64,
    pub open: u64,
    /// Waits no request is named for, and their total (`RequestsDoc::unattributed_waits`).
    pub unattributed: u64,
    pub unattributed_ns: u64,
    pub sites: Vec<WaitSiteRow>,
}

/// The document's section of `p` (`None` without `--async` records).
pub fn section(p: &Profile) -> Option<RequestsSection> {
    let d = requests(p, 10);
    d.recorded.then_some(RequestsSection {
        requests: d.endpoints,
        slowest_requests: d.slowest,
        unmatched_request_stops: d.unmatched_stops,
        waits: WaitsDoc {
            count: d.waits,
            wait_ns: d.wait_ns,
            open: d.open_waits,
            unattributed: d.unattributed_waits,
            unattributed_ns: d.unattributed_wait_ns,
            sites: d.wait_sites,
        },
        thread_pool: d.pool,
        request_cpu: d.cpu,
    })
}

/// Nearest-rank percentile of sorted values.
pub fn nearest_rank(sorted: &[u64], p: u32) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (p as u64 * sorted.len() as u64).div_ceil(100).max(1) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

/// One endpoint's requests as they are gathered: latencies, unfinished, count per status.
type Gathered = (Vec<u64>, u64, std::collections::BTreeMap<u32, u64>);

fn endpoint_rows(requests: &[Request]) -> Vec<EndpointRow> {
    let mut by: std::collections::BTreeMap<String, Gathered> = Default::default();
    for r in requests {
        let e = by.entry(r.endpoint()).or_default();
        match r.latency_ns() {
            Some(l) => {
                e.0.push(l);
                *e.2.entry(r.status).or_default() += 1;
            }
            None => e.1 += 1,
        }
    }
    let mut rows: Vec<EndpointRow> = by
        .into_iter()
        .map(|(endpoint, (mut l, unfinished, statuses))| {
            l.sort_unstable();
            EndpointRow {
                endpoint,
                count: l.len() as u64,
                unfinished,
                p50_ns: nearest_rank(&l, 50),
                p95_ns: nearest_rank(&l, 95),
                p99_ns: nearest_rank(&l, 99),
                max_ns: l.last().copied().unwrap_or(0),
                total_ns: l.iter().fold(0u64, |a, &b| a.saturating_add(b)),
                cpu_ns: None,
                blocked_ns: None,
                awaiting_ns: None,
                statuses: statuses.into_iter().collect(),
            }
        })
        .collect();
    rows.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then(a.endpoint.cmp(&b.endpoint)));
    rows
}

fn pool_doc(q: &Requests) -> PoolDoc {
    let workers: Vec<(u64, u32)> = q.pool.iter().filter(|c| c.kind < 2).map(|c| (c.ts, c.count)).collect();
    let adjustments: Vec<(u64, u32, &'static str)> =
        q.pool.iter().filter(|c| c.kind == 2).map(|c| (c.ts, c.count, pool_reason::name(c.reason))).collect();
    // An injection: an adjustment of this reason that raised the pool's target.
    let mut target = 0;
    let mut raised = Vec::new();
    for c in q.pool.iter().filter(|c| c.kind == 2) {
        raised.push((c, c.count > target));
        target = c.count;
    }
    let injected =
        |reason| raised.iter().filter(|(c, up)| *up && c.reason == reason).map(|(c, _)| *c).collect::<Vec<_>>();
    let starving = injected(pool_reason::STARVATION);
    let blocking = injected(pool_reason::COOPERATIVE_BLOCKING);
    let note = (!starving.is_empty() || !blocking.is_empty()).then(|| {
        let mut all: Vec<_> = starving.iter().chain(&blocking).collect();
        all.sort_by_key(|c| c.ts);
        let (first, last) = (all[0], all[all.len() - 1]);
        format!(
            "thread-pool starvation: the pool injected threads while work waited {} times ({} for starvation, {} because \
             pool threads blocked) between {} ms and {} ms, raising its target to {} threads; blocking waits on pool \
             threads (sync-over-async: .Result, .Wait()) are the usual cause — see the waits below; requests that waited \
             for a thread before the server read them waited longer than their latencies here say",
            all.len(),
            starving.len(),
            blocking.len(),
            first.ts / 1_000_000,
            last.ts / 1_000_000,
            all.iter().map(|c| c.count).max().unwrap_or(0)
        )
    });
    PoolDoc {
        max_workers: q.max_workers(),
        workers,
        adjustments,
        starvation_injections: starving.len() as u64,
        blocking_injections: blocking.len() as u64,
        note,
    }
}

/// The requests' split (`split`): per request (index in `p.requests.requests`) its
/// (cpu, blocked, awaiting) ns, `u64::MAX` where unknown; and the waits no request could be
/// named for.
struct Split {
    per_request: Vec<[u64; 3]>,
    unattributed_waits: u64,
    unattributed_wait_ns: u64,
}

/// Per request: its time blocked and awaiting, when the trace has task events (`p.asynchrony`);
/// its CPU time is unknown.
///
/// Blocked: the waits on wait handles (`WaitHandleWaitStart`/`Stop`, .NET 9 and later) whose own
/// event carried the request's activity id or one nested in it (the runtime writes the thread's
/// current activity id with the event, and the activity tracker keeps it with the execution
/// context), clipped to the request. A wait without an activity id, or whose id names no request
/// running at its start, is unattributed (counted apart), never given to a request by its thread
/// or time. Unknown on .NET 8 (no waits) and for traces whose waits carry no ids (older traces).
///
/// Awaiting: the leaf awaits whose `TaskWaitBegin` carried the request's activity (or one nested
/// in it), clipped to the request (awaits of async methods with frames of their own are not
/// counted: their own awaits are).
///
/// CPU: the CPU samples that carried the request's activity id (or one nested in it), see
/// `crate::request_cpu`; unknown where the samples carry no activity id (older traces, or the agent
/// did not find where the runtime keeps it). The task events' activity ids are not used for CPU:
/// `TaskStarted` and `TaskWaitEnd` are written before the task's execution context is restored,
/// so they do not name the request, and a share of the samples given to a request by thread and
/// time would be a guess.
fn split(p: &Profile, cpu: Option<&crate::request_cpu::PerRequest>) -> Option<Split> {
    let index = p.asynchrony.as_ref()?;
    let reqs = &p.requests.requests;
    // Only ended requests are candidates (an id's list holds no unfinished one).
    let by_activity = RequestIndex::new(reqs, |r| r.end_ns.is_some());
    let at = |activity: u128, ts: u64| by_activity.owner(reqs, activity, ts, 0);
    let clip = |i: usize, from: u64, to: u64| -> u64 {
        let r = &reqs[i];
        to.min(r.end_ns.unwrap_or(0)).saturating_sub(from.max(r.start_ns))
    };
    let mut out = Split {
        per_request: (0..reqs.len()).map(|i| [cpu.map_or(u64::MAX, |c| c.per_request[i].0), 0, 0]).collect(),
        unattributed_waits: 0,
        unattributed_wait_ns: 0,
    };
    let waits = &p.requests.waits;
    let waits_known = !waits.is_empty() && waits.iter().any(|w| w.activity != 0);
    for w in waits {
        match at(w.activity, w.start_ns) {
            Some(i) => out.per_request[i][1] += clip(i, w.start_ns, w.end_ns),
            None => {
                out.unattributed_waits += 1;
                out.unattributed_wait_ns += w.end_ns - w.start_ns;
            }
        }
    }
    for a in index.awaits().iter().filter(|a| a.leaf && a.flow != 0) {
        let Some(i) = at(a.flow, a.start) else { continue };
        out.per_request[i][2] += clip(i, a.start, a.end);
    }
    if !waits_known {
        for o in &mut out.per_request {
            o[1] = u64::MAX;
        }
    }
    Some(out)
}

/// The requests view of `p`, with the `top` slowest requests.
pub fn requests(p: &Profile, top: usize) -> RequestsDoc {
    let q = &p.requests;
    let mut slow: Vec<&Request> = q.requests.iter().filter(|r| r.end_ns.is_some()).collect();
    slow.sort_by(|a, b| b.latency_ns().cmp(&a.latency_ns()).then(a.start_ns.cmp(&b.start_ns)));
    let slowest = slow
        .into_iter()
        .take(top)
        .map(|r| SlowRequest {
            endpoint: r.endpoint(),
            method: r.method.clone(),
            path: r.path.clone(),
            status: r.status,
            start_ns: r.start_ns,
            latency_ns: r.latency_ns().unwrap_or(0),
            os_tid: r.os_tid,
            activity: format!("{:032x}", r.activity),
            cpu_ns: None,
            top_stacks: Vec::new(),
        })
        .collect();
    let wait_sites = q
        .wait_sites
        .iter()
        .map(|w| (w.source, &w.waits))
        .map(|(source, s)| WaitSiteRow {
            site: s.site.clone(),
            kind: if source == 1 { "Monitor.Wait" } else { "wait" },
            count: s.count,
            wait_ns: s.wait_ns,
            max_wait_ns: s.max_wait_ns,
            stack: s.stacks.first().map(|(st, _)| crate::weighted_stacks::stack_names(p, *st)).unwrap_or_default(),
            stack_count: s.stacks.first().map(|x| x.1).unwrap_or(0),
        })
        .collect();
    let cpu = crate::request_cpu::per_request(p);
    let split = split(p, cpu.as_ref());
    let mut slowest: Vec<SlowRequest> = slowest;
    if let Some(c) = &cpu {
        for s in &mut slowest {
            let Some(i) = q.requests.iter().position(|r| {
                r.start_ns == s.start_ns && r.os_tid == s.os_tid && format!("{:032x}", r.activity) == s.activity
            }) else {
                continue;
            };
            s.cpu_ns = Some(c.per_request[i].0);
            s.top_stacks = c.top_stacks(p, i, TOP_STACKS);
        }
    }
    RequestsDoc {
        recorded: q.recorded,
        endpoints: {
            let mut rows = endpoint_rows(&q.requests);
            if let Some(split) = &split {
                for row in &mut rows {
                    let mut sums = [Some(0u64); 3];
                    for (r, x) in q.requests.iter().zip(&split.per_request) {
                        if r.end_ns.is_some() && r.endpoint() == row.endpoint {
                            for k in 0..3 {
                                sums[k] = sums[k].zip((x[k] != u64::MAX).then_some(x[k])).map(|(s, v)| s + v);
                            }
                        }
                    }
                    [row.cpu_ns, row.blocked_ns, row.awaiting_ns] = sums;
                }
            }
            rows
        },
        slowest,
        unmatched_stops: q.unmatched_stops,
        waits: q.waits.len() as u64,
        wait_ns: q.waits.iter().map(|w| w.end_ns - w.start_ns).fold(0, u64::saturating_add),
        wait_sites,
        open_waits: q.open_waits,
        unattributed_waits: split.as_ref().map_or(0, |s| s.unattributed_waits),
        unattributed_wait_ns: split.as_ref().map_or(0, |s| s.unattributed_wait_ns),
        pool: pool_doc(q),
        cpu: cpu.map(|c| c.split),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<u64> = (1..=200).collect();
        assert_eq!((nearest_rank(&v, 50), nearest_rank(&v, 95), nearest_rank(&v, 99)), (100, 190, 198));
        assert_eq!(nearest_rank(&[7], 99), 7);
        assert_eq!(nearest_rank(&[], 50), 0);
        assert_eq!(nearest_rank(&[1, 2, 3], 50), 2);
    }

    #[test]
    fn endpoints_group_by_route_and_count_unfinished_apart() {
        let r = |start, end: Option<u64>, path: &str, name: &str, status| Request {
            start_ns: start,
            end_ns: end,
            method: "GET".into(),
            path: path.into(),
            endpoint_name: name.into(),
            status,
            ..Default::default()
        };
        let rows = endpoint_rows(&[
            r(0, Some(10), "/a/1", "HTTP: GET /a/{id}", 200),
            r(0, Some(30), "/a/2", "HTTP: GET /a/{id}", 200),
            r(0, Some(20), "/a/3", "HTTP: GET /a/{id}", 404),
            r(0, None, "/a/4", "HTTP: GET /a/{id}", 0),
            r(0, Some(5), "/b", "", 0),
        ]);
        assert_eq!(rows.len(), 2);
        let a = &rows[0];
        assert_eq!(
            (a.endpoint.as_str(), a.count, a.unfinished, a.p50_ns, a.p99_ns, a.total_ns),
            ("GET /a/{id}", 3, 1, 20, 30, 60)
        );
        assert_eq!(a.statuses, vec![(200, 2), (404, 1)]);
        assert_eq!((rows[1].endpoint.as_str(), rows[1].count), ("GET /b", 1));
    }
}
