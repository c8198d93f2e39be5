//! Requests, waits and the thread pool (`record --async`): ASP.NET Core requests with their start,
//! end, endpoint and status; the threads' waits on wait handles (`Task.Wait`, `.Result`,
//! `Monitor.Wait`, `SemaphoreSlim.Wait`…, .NET 9 and later) with the waiting stack; the thread
//! pool's worker count over time and why it changed.
//!
//! [`RequestFacts`] keeps the records as time-stamped facts while the trace is read;
//! [`RequestFacts::finish`] computes [`Requests`] for a [`TimeRange`], as often as wanted (a live
//! profile asks again as records arrive).
//!
//! A request is its `RequestStarted` and the `RequestStopped` of the same EventSource activity id
//! (the runtime's activity tracker numbers each request when `TasksFlowActivityIds` is on); its
//! latency is the difference of the two times the runtime's events were delivered at, both read
//! from the agent's one clock. The endpoint and status come from ASP.NET Core's log of the same
//! activity (`RequestEndpoint`). A request is counted in the range its start falls in.

use std::collections::HashMap;

use clrprof_trace::{activity_id, pool_reason, Record};

use crate::events::ContentionSite;
use crate::stacks::{CostTree, FrameKey, StackId};
use crate::TimeRange;

/// One ASP.NET Core request.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Request {
    pub start_ns: u64,
    /// `None` while the request had not ended when the trace ended.
    pub end_ns: Option<u64>,
    /// The thread that took the request (`RequestStart`'s).
    pub os_tid: u32,
    /// The EventSource activity id of the request (0 when the tracker was off).
    #[serde(serialize_with = "hex_u128")]
    pub activity: u128,
    pub method: String,
    pub path: String,
    /// The endpoint's name as ASP.NET Core logs it (`HTTP: GET /items/{id:int}` for a minimal API,
    /// the action for MVC); empty when the log did not say.
    pub endpoint_name: String,
    /// The response's status code; 0 when unknown.
    pub status: u32,
}

fn hex_u128<S: serde::Serializer>(v: &u128, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("{v:032x}"))
}

impl Request {
    /// The request's latency (end − start); `None` while unfinished.
    pub fn latency_ns(&self) -> Option<u64> {
        self.end_ns.map(|e| e.saturating_sub(self.start_ns))
    }

    /// The name requests are grouped by: the route (`GET /items/{id:int}`) when ASP.NET Core's log
    /// named the endpoint, else the method and the path.
    pub fn endpoint(&self) -> String {
        endpoint_of(&self.method, &self.path, &self.endpoint_name)
    }
}

/// The endpoint name of a request: `HTTP: GET /route` (minimal APIs) becomes `GET /route` (and
/// `HTTP: GET /route => Handler` keeps the route); another name (MVC's action) is prefixed with
/// the method; without a name, the method and the path.
pub fn endpoint_of(method: &str, path: &str, name: &str) -> String {
    if let Some(route) = name.strip_prefix("HTTP: ") {
        return route.split(" => ").next().unwrap_or(route).to_string();
    }
    if !name.is_empty() {
        return format!("{method} {name}");
    }
    format!("{method} {path}")
}

/// One wait of a thread on a wait handle (`WaitHandleWaitStart`–`WaitHandleWaitStop`).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Wait {
    pub start_ns: u64,
    pub end_ns: u64,
    pub os_tid: u32,
    /// 0 unknown (most waits), 1 `Monitor.Wait`.
    pub source: u8,
    /// The waiting stack in the profile's stack table (`None`: no managed frame).
    pub stack: Option<StackId>,
    /// The EventSource activity id the wait event carried (the thread's at the wait: its
    /// request's or one nested in it); 0 when none (or a trace older than this field).
    #[serde(serialize_with = "hex_u128")]
    pub activity: u128,
}

/// Waits at one site, of one source.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct WaitSite {
    /// 0 unknown (a wait handle, a contended lock…), 1 `Monitor.Wait` (`Task.Wait` and `.Result`
    /// end in one, through `ManualResetEventSlim`).
    pub source: u8,
    /// The site, count, total and longest wait, and the waiting stacks.
    pub waits: ContentionSite,
}

/// A change of the thread pool's workers (`ThreadPoolWorkers`).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct PoolChange {
    pub ts: u64,
    /// 0 a worker started, 1 a worker stopped, 2 the pool's new target.
    pub kind: u8,
    /// Active workers (kinds 0, 1) or the new target (kind 2).
    pub count: u32,
    pub reason: u32,
}

/// What the trace says of requests, waits and the pool inside a range.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Requests {
    /// The trace has any record of this module (a request, a wait or a pool change).
    pub recorded: bool,
    /// Requests that started in the range, by start.
    pub requests: Vec<Request>,
    /// Request ends whose start the trace does not hold (started before recording began).
    pub unmatched_stops: u64,
    /// Ended waits that started in the range, by start.
    pub waits: Vec<Wait>,
    /// The same waits by waiting site (the innermost frame outside `System.Threading`) and
    /// source, longest total first.
    pub wait_sites: Vec<WaitSite>,
    /// Waits still open at the end of the trace.
    pub open_waits: u64,
    /// The pool's worker changes in the range, by time.
    pub pool: Vec<PoolChange>,
}

impl Requests {
    /// Adjustments that added threads because work waited in the queue (`Starvation`): (time,
    /// new target).
    pub fn starvation(&self) -> Vec<(u64, u32)> {
        self.pool
            .iter()
            .filter(|c| c.kind == 2 && c.reason == pool_reason::STARVATION)
            .map(|c| (c.ts, c.count))
            .collect()
    }

    /// The most worker threads active at once, by the pool's own count.
    pub fn max_workers(&self) -> u32 {
        self.pool.iter().filter(|c| c.kind < 2).map(|c| c.count).max().unwrap_or(0)
    }
}

#[derive(Clone, Debug)]
struct WaitFact {
    ts: u64,
    os_tid: u32,
    source: u8,
    stack: Vec<u64>,
    activity: u128,
    end: Option<u64>,
}

/// The facts of this module as records arrive. Requests are paired at [`RequestFacts::finish`],
/// by time: records come in the order of the agent's per-thread buffers, not of time, and the
/// runtime gives the requests of one connection the same activity id, one after the other.
#[derive(Clone, Debug, Default)]
pub struct RequestFacts {
    /// `RequestStarted`: (ts, os_tid, activity, method, path).
    starts: Vec<(u64, u32, u128, String, String)>,
    /// `RequestStopped`: (ts, activity).
    stops: Vec<(u64, u128)>,
    /// `RequestEndpoint`: (ts, activity, endpoint name, status).
    details: Vec<(u64, u128, String, u32)>,
    waits: Vec<WaitFact>,
    open_waits: HashMap<u32, usize>,
    pool: Vec<PoolChange>,
}

impl RequestFacts {
    /// Takes a record of this module; `false` for the others.
    pub fn add(&mut self, r: &Record) -> bool {
        match r {
            Record::RequestStarted(s) => {
                self.starts.push((s.ts, s.os_tid, activity_id(&s.activity), s.method.clone(), s.path.clone()))
            }
            Record::RequestStopped(s) => self.stops.push((s.ts, activity_id(&s.activity))),
            Record::RequestEndpoint(e) => {
                self.details.push((e.ts, activity_id(&e.activity), e.endpoint.clone(), e.status))
            }
            Record::WaitStarted(w) => {
                self.open_waits.insert(w.os_tid, self.waits.len());
                self.waits.push(WaitFact {
                    ts: w.ts,
                    os_tid: w.os_tid,
                    source: w.source,
                    stack: w.stack.clone(),
                    activity: activity_id(&w.activity),
                    end: None,
                });
            }
            Record::WaitEnded(w) => {
                if let Some(i) = self.open_waits.remove(&w.os_tid) {
                    let x = &mut self.waits[i];
                    x.end = Some(w.ts.max(x.ts));
                }
            }
            Record::ThreadPoolWorkers(t) => {
                self.pool.push(PoolChange { ts: t.ts, kind: t.kind, count: t.count, reason: t.reason })
            }
            _ => return false,
        }
        true
    }

    /// Every request, each start paired with the next stop of its activity in time (a start
    /// followed by another start, or by nothing, is unfinished), with its endpoint and status;
    /// and the number of stops without a start.
    fn pair(&self) -> (Vec<Request>, u64) {
        let mut events: HashMap<u128, Vec<(u64, Option<usize>)>> = HashMap::new();
        for (i, s) in self.starts.iter().enumerate() {
            events.entry(s.2).or_default().push((s.0, Some(i)));
        }
        for &(ts, a) in &self.stops {
            events.entry(a).or_default().push((ts, None));
        }
        let mut requests = Vec::with_capacity(self.starts.len());
        let mut unmatched = 0;
        let mut activities: Vec<_> = events.into_iter().collect();
        activities.sort_by_key(|(a, _)| *a);
        for (activity, mut ev) in activities {
            // At one time, a stop before a start: the stop ends the earlier request.
            ev.sort_by_key(|&(ts, start)| (ts, start.is_some()));
            let mut open: Option<usize> = None;
            for (ts, start) in ev {
                match start {
                    Some(i) => {
                        let (start_ns, os_tid, _, method, path) = &self.starts[i];
                        open = Some(requests.len());
                        requests.push(Request {
                            start_ns: *start_ns,
                            end_ns: None,
                            os_tid: *os_tid,
                            activity,
                            method: method.clone(),
                            path: path.clone(),
                            ..Default::default()
                        });
                    }
                    None => match open.take() {
                        Some(r) if activity != 0 => requests[r].end_ns = Some(ts),
                        _ => unmatched += 1,
                    },
                }
            }
        }
        requests.sort_by_key(|r| (r.start_ns, r.os_tid, r.activity));
        let index = RequestIndex::new(&requests, |_| true);
        for (ts, activity, endpoint, status) in &self.details {
            let Some(i) = index.owner(&requests, *activity, *ts, 0) else { continue };
            let r = &mut requests[i];
            if !endpoint.is_empty() {
                r.endpoint_name = endpoint.clone();
            }
            if *status != 0 {
                r.status = *status;
            }
        }
        (requests, unmatched)
    }

    /// Drops what started before `ts` (kept: waits still open; a request that started before
    /// `ts` and ends after it then counts as a stop without a start).
    pub fn forget_before(&mut self, ts: u64) {
        self.starts.retain(|s| s.0 >= ts);
        self.stops.retain(|s| s.0 >= ts);
        self.details.retain(|d| d.0 >= ts);
        self.waits.retain(|w| w.ts >= ts || w.end.is_none());
        self.open_waits =
            self.waits.iter().enumerate().filter(|(_, w)| w.end.is_none()).map(|(i, w)| (w.os_tid, i)).collect();
        self.pool.retain(|c| c.ts >= ts);
    }

    pub fn retained(&self) -> usize {
        self.starts.len() + self.stops.len() + self.details.len() + self.waits.len() + self.pool.len()
    }

    /// The requests, waits and pool changes of `range`; waiting stacks go to `costs`.
    pub fn finish(&self, costs: &mut CostTree, name: &dyn Fn(u64) -> String, range: TimeRange) -> Requests {
        let recorded = !self.starts.is_empty() || !self.waits.is_empty() || !self.pool.is_empty();
        let (all, unmatched_stops) = self.pair();
        let requests: Vec<Request> = all.into_iter().filter(|r| range.contains(r.start_ns)).collect();
        let mut waits = Vec::new();
        let mut open_waits = 0;
        let mut by_site: HashMap<(String, u8), ContentionSite> = HashMap::new();
        let mut stack_ids: HashMap<&[u64], Option<StackId>> = HashMap::new();
        for w in self.waits.iter().filter(|w| range.contains(w.ts)) {
            let Some(end) = w.end else {
                open_waits += 1;
                continue;
            };
            let stack = *stack_ids.entry(w.stack.as_slice()).or_insert_with(|| {
                let ids: Vec<_> =
                    w.stack.iter().rev().map(|&f| costs.stacks.intern_frame(FrameKey::Function(f))).collect();
                costs.stacks.intern_stack(&ids)
            });
            let wait = end - w.ts;
            waits.push(Wait {
                start_ns: w.ts,
                end_ns: end,
                os_tid: w.os_tid,
                source: w.source,
                stack,
                activity: w.activity,
            });
            let site =
                w.stack.iter().map(|&f| name(f)).find(|n| !n.starts_with("System.Threading.")).unwrap_or_else(|| {
                    w.stack.first().map(|&f| name(f)).unwrap_or_else(|| "[no managed frame]".into())
                });
            let e = by_site
                .entry((site.clone(), w.source))
                .or_insert_with(|| ContentionSite { site, ..Default::default() });
            e.count += 1;
            e.wait_ns = e.wait_ns.saturating_add(wait);
            e.max_wait_ns = e.max_wait_ns.max(wait);
            if let Some(s) = stack {
                match e.stacks.iter().position(|x| x.0 == s) {
                    Some(i) => {
                        e.stacks[i].1 += 1;
                        e.stack_wait_ns[i] = e.stack_wait_ns[i].saturating_add(wait);
                    }
                    None => {
                        e.stacks.push((s, 1));
                        e.stack_wait_ns.push(wait);
                    }
                }
            }
        }
        waits.sort_by_key(|w| (w.start_ns, w.os_tid));
        let mut wait_sites: Vec<WaitSite> =
            by_site.into_iter().map(|((_, source), waits)| WaitSite { source, waits }).collect();
        for s in wait_sites.iter_mut().map(|w| &mut w.waits) {
            let mut both: Vec<((StackId, u64), u64)> = s.stacks.drain(..).zip(s.stack_wait_ns.drain(..)).collect();
            both.sort_by(|(a, wa), (b, wb)| wb.cmp(wa).then(b.1.cmp(&a.1)).then(a.0.cmp(&b.0)));
            (s.stacks, s.stack_wait_ns) = both.into_iter().unzip();
        }
        wait_sites.sort_by(|a, b| {
            (b.waits.wait_ns.cmp(&a.waits.wait_ns)).then(a.waits.site.cmp(&b.waits.site)).then(a.source.cmp(&b.source))
        });
        let mut pool: Vec<PoolChange> = self.pool.iter().filter(|c| range.contains(c.ts)).cloned().collect();
        pool.sort_by_key(|c| c.ts);
        Requests { recorded, requests, unmatched_stops, waits, wait_sites, open_waits, pool }
    }
}

/// Requests by activity, for [`RequestIndex::owner`]: each request's id, and each id under the
/// path it encodes, so that the ancestors of an id are found by its path's prefixes (at most 25
/// lookups) instead of by comparing it with every request's id.
#[derive(Clone, Debug, Default)]
pub struct RequestIndex {
    /// Indices of the requests of each id, by start (the requests' order).
    by_activity: HashMap<u128, Vec<usize>>,
    /// The ids whose path is `nibbles` long, by that path (the first bytes, masked to it).
    by_path: HashMap<(u32, [u8; 12]), Vec<u128>>,
}

/// The first `nibbles` nibbles of an id's path (the path's bytes, masked).
fn path_key(a: u128, nibbles: u32) -> (u32, [u8; 12]) {
    let b = a.to_le_bytes();
    let mut k = [0u8; 12];
    let whole = (nibbles / 2) as usize;
    k[..whole].copy_from_slice(&b[..whole]);
    if nibbles % 2 == 1 {
        k[whole] = b[whole] & 0xf0;
    }
    (nibbles, k)
}

impl RequestIndex {
    /// The requests `keep` accepts (and that carry an id), in `requests`' order.
    pub fn new(requests: &[Request], keep: impl Fn(&Request) -> bool) -> RequestIndex {
        let mut ix = RequestIndex::default();
        for (i, r) in requests.iter().enumerate() {
            if r.activity == 0 || !keep(r) {
                continue;
            }
            let list = ix.by_activity.entry(r.activity).or_default();
            if list.is_empty() {
                let n = path_nibbles(r.activity);
                ix.by_path.entry(path_key(r.activity, n)).or_default().push(r.activity);
            }
            list.push(i);
        }
        ix
    }

    /// The request a line or sample of `activity` at `ts` belongs to: a request of that activity,
    /// or of its ancestor, running at `ts` (the latest of its id to start by then, not ended more
    /// than `slack_ns` before `ts`). The runtime's activity tracker encodes an activity's path from
    /// the root in the first 12 bytes of its id, as nibbles; a nested activity (a logging scope
    /// started inside a request: ASP.NET Core opens one per request) copies its parent's path and
    /// appends to it. Of the requests' activities, the ancestor shares the longest prefix with the
    /// id (its whole path), any other less than its own path.
    pub fn owner(&self, requests: &[Request], activity: u128, ts: u64, slack_ns: u64) -> Option<usize> {
        if activity == 0 {
            return None;
        }
        let mut best: Option<(u32, usize)> = None;
        for nibbles in 0..=24 {
            let Some(ids) = self.by_path.get(&path_key(activity, nibbles)) else { continue };
            for &a in ids {
                let n = if a == activity { 128 } else { common_path_nibbles(a, activity) };
                if n < nibbles || best.is_some_and(|(m, _)| m >= n) {
                    continue;
                }
                let list = &self.by_activity[&a];
                // The list is by start: the last request started by `ts`, if it had not ended before.
                let k = list.partition_point(|&i| requests[i].start_ns <= ts);
                if k == 0 {
                    continue;
                }
                let i = list[k - 1];
                if requests[i].end_ns.is_none_or(|e| e.saturating_add(slack_ns) >= ts) {
                    best = Some((n, i));
                }
            }
        }
        best.map(|(_, i)| i)
    }
}

/// Nibbles (high nibble of each byte first) the activity paths of `a` and `b` share, over the
/// 12 bytes that hold a path (the last 4 are a checksum).
pub fn common_path_nibbles(a: u128, b: u128) -> u32 {
    let (a, b) = (a.to_le_bytes(), b.to_le_bytes());
    let mut n = 0;
    for i in 0..12 {
        if a[i] == b[i] {
            n += 2;
            continue;
        }
        if a[i] >> 4 == b[i] >> 4 {
            n += 1;
        }
        break;
    }
    n
}

/// Nibbles of the path of `a`, up to its last non-zero nibble (a lower bound of the encoded
/// path: an id's last byte may be zero).
pub fn path_nibbles(a: u128) -> u32 {
    let b = a.to_le_bytes();
    let mut n = 0;
    for (i, &x) in b[..12].iter().enumerate() {
        if x & 0x0f != 0 {
            n = 2 * i as u32 + 2;
        } else if x != 0 {
            n = 2 * i as u32 + 1;
        }
    }
    n
}

/// The time of a record of this module (0 for the others).
pub fn record_ts(r: &Record) -> u64 {
    match r {
        Record::RequestStarted(x) => x.ts,
        Record::RequestStopped(x) => x.ts,
        Record::RequestEndpoint(x) => x.ts,
        Record::WaitStarted(x) => x.ts,
        Record::WaitEnded(x) => x.ts,
        Record::ThreadPoolWorkers(x) => x.ts,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clrprof_trace::*;

    fn act(n: u8) -> Vec<u8> {
        let mut a = vec![0u8; 16];
        a[0] = n;
        a
    }

    #[test]
    fn pairs_requests_by_activity_and_names_them_by_route() {
        let mut f = RequestFacts::default();
        let recs: Vec<Record> = vec![
            RequestStarted { ts: 10, os_tid: 1, activity: act(1), method: "GET".into(), path: "/items/4".into() }
                .into(),
            RequestStarted { ts: 12, os_tid: 2, activity: act(2), method: "GET".into(), path: "/plain".into() }.into(),
            RequestEndpoint {
                ts: 13,
                os_tid: 1,
                activity: act(1),
                endpoint: "HTTP: GET /items/{id:int} => GetItem".into(),
                status: 0,
            }
            .into(),
            // The second ends first, on another thread.
            RequestStopped { ts: 20, os_tid: 3, activity: act(2) }.into(),
            RequestEndpoint { ts: 29, os_tid: 1, activity: act(1), endpoint: String::new(), status: 200 }.into(),
            RequestStopped { ts: 30, os_tid: 1, activity: act(1) }.into(),
            RequestStopped { ts: 31, os_tid: 1, activity: act(9) }.into(),
            // A log line read before its request's start (another thread's buffer came first).
            RequestEndpoint {
                ts: 41,
                os_tid: 5,
                activity: act(3),
                endpoint: "Shop.Home.Index (Shop)".into(),
                status: 0,
            }
            .into(),
            RequestStarted { ts: 40, os_tid: 4, activity: act(3), method: "POST".into(), path: "/home".into() }.into(),
        ];
        for r in &recs {
            assert!(f.add(r));
        }
        let mut costs = CostTree::default();
        let q = f.finish(&mut costs, &|_| String::new(), TimeRange::ALL);
        assert!(q.recorded);
        assert_eq!(q.unmatched_stops, 1);
        let got: Vec<(String, Option<u64>, u32)> =
            q.requests.iter().map(|r| (r.endpoint(), r.latency_ns(), r.status)).collect();
        assert_eq!(
            got,
            vec![
                ("GET /items/{id:int}".to_string(), Some(20), 200),
                ("GET /plain".to_string(), Some(8), 0),
                ("POST Shop.Home.Index (Shop)".to_string(), None, 0),
            ]
        );
        // A window counts the requests that started in it.
        let q = f.finish(&mut costs, &|_| String::new(), TimeRange::new(11, 35));
        assert_eq!(q.requests.len(), 1);
        assert_eq!(q.requests[0].path, "/plain");
    }

    #[test]
    fn requests_of_one_connection_share_an_activity_id_and_pair_by_time() {
        // Two requests on one connection, the same id; records in buffer order, not time order.
        let recs: Vec<Record> = vec![
            RequestStarted { ts: 10, os_tid: 1, activity: act(5), method: "GET".into(), path: "/a".into() }.into(),
            RequestStarted { ts: 30, os_tid: 1, activity: act(5), method: "GET".into(), path: "/b".into() }.into(),
            RequestStopped { ts: 20, os_tid: 2, activity: act(5) }.into(),
            RequestStopped { ts: 45, os_tid: 2, activity: act(5) }.into(),
            RequestEndpoint { ts: 31, os_tid: 1, activity: act(5), endpoint: "HTTP: GET /b".into(), status: 0 }.into(),
        ];
        let mut f = RequestFacts::default();
        for r in &recs {
            f.add(r);
        }
        let q = f.finish(&mut CostTree::default(), &|_| String::new(), TimeRange::ALL);
        let got: Vec<(String, Option<u64>)> = q.requests.iter().map(|r| (r.endpoint(), r.latency_ns())).collect();
        assert_eq!(got, vec![("GET /a".to_string(), Some(10)), ("GET /b".to_string(), Some(15))]);
        assert_eq!(q.unmatched_stops, 0);
    }

    #[test]
    fn a_log_line_in_a_nested_activity_belongs_to_its_request() {
        // Paths as the tracker writes them: [1, 12] (request A), [1, 13] (request B), and a scope
        // inside B: [1, 13, 1]; then the checksum's 4 bytes.
        let id = |bytes: &[u8]| {
            let mut a = vec![0u8; 16];
            a[..bytes.len()].copy_from_slice(bytes);
            a[12..].copy_from_slice(&[9, 9, 9, 9]);
            a
        };
        let a = id(&[0x1c, 0x0c]);
        let b = id(&[0x1c, 0x0d]);
        let scope = id(&[0x1c, 0x0d, 0x10]);
        let mut f = RequestFacts::default();
        for r in [
            Record::from(RequestStarted { ts: 1, os_tid: 1, activity: a, method: "GET".into(), path: "/a".into() }),
            RequestStarted { ts: 2, os_tid: 2, activity: b.clone(), method: "GET".into(), path: "/b/7".into() }.into(),
            RequestEndpoint { ts: 3, os_tid: 2, activity: scope, endpoint: "HTTP: GET /b/{id}".into(), status: 404 }
                .into(),
            RequestStopped { ts: 4, os_tid: 2, activity: b }.into(),
        ] {
            f.add(&r);
        }
        let q = f.finish(&mut CostTree::default(), &|_| String::new(), TimeRange::ALL);
        let got: Vec<(String, u32)> = q.requests.iter().map(|r| (r.endpoint(), r.status)).collect();
        assert_eq!(got, vec![("GET /a".to_string(), 0), ("GET /b/{id}".to_string(), 404)]);
    }

    #[test]
    fn waits_by_site_with_their_stacks_and_starvation() {
        let mut f = RequestFacts::default();
        let recs: Vec<Record> = vec![
            WaitStarted { ts: 100, os_tid: 7, source: 0, stack: vec![1, 2, 3], activity: vec![] }.into(),
            WaitStarted { ts: 110, os_tid: 8, source: 0, stack: vec![1, 2, 3], activity: vec![] }.into(),
            WaitEnded { ts: 150, os_tid: 7 }.into(),
            WaitEnded { ts: 170, os_tid: 8 }.into(),
            WaitStarted { ts: 200, os_tid: 7, source: 1, stack: vec![4], activity: vec![] }.into(),
            WaitEnded { ts: 201, os_tid: 9 }.into(),
            ThreadPoolWorkers { ts: 5, os_tid: 1, kind: 0, count: 3, retired: 0, reason: 0 }.into(),
            ThreadPoolWorkers { ts: 6, os_tid: 1, kind: 2, count: 5, retired: 0, reason: pool_reason::STARVATION }
                .into(),
            ThreadPoolWorkers { ts: 7, os_tid: 1, kind: 0, count: 4, retired: 0, reason: 0 }.into(),
        ];
        for r in &recs {
            assert!(f.add(r));
        }
        let names = |f: u64| match f {
            1 => "System.Threading.Tasks.Task.Wait".to_string(),
            2 => "App.Handler".to_string(),
            3 => "App.Main".to_string(),
            _ => "System.Threading.Monitor.Wait".to_string(),
        };
        let mut costs = CostTree::default();
        let q = f.finish(&mut costs, &names, TimeRange::ALL);
        assert_eq!(q.waits.len(), 2);
        assert_eq!(q.open_waits, 1);
        assert_eq!(q.wait_sites.len(), 1);
        assert_eq!(q.wait_sites[0].source, 0);
        let s = &q.wait_sites[0].waits;
        assert_eq!((s.site.as_str(), s.count, s.wait_ns, s.max_wait_ns), ("App.Handler", 2, 110, 60));
        assert_eq!(s.stacks.len(), 1);
        assert_eq!(s.stacks[0].1, 2);
        assert_eq!(q.starvation(), vec![(6, 5)]);
        assert_eq!(q.max_workers(), 4);
    }
}
