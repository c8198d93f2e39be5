//! CPU time per request (`record --async`): each CPU sample carries the EventSource activity id
//! its thread had when the sample was taken (the agent copies it from the runtime's `Thread`
//! object in the signal handler), and belongs to the request whose activity id is that id or an
//! ancestor of it (the activity tracker nests ids: a logging scope or a task's activity inside a
//! request copies the request's path and appends to it; see
//! [`clrprof_model::requests::common_path_nibbles`]).
//!
//! Several requests may carry one id (the requests of one connection, one after the other), so
//! the time decides among them: a sample record's time is when the sampler collected the thread's
//! samples (at most one round of the sampler, well under [`DRAIN_SLACK_NS`], after each was taken),
//! so the sample belongs to the latest request of its id that started before that time, provided
//! it had not ended more than [`DRAIN_SLACK_NS`] earlier. Samples without an id, or whose id names
//! no request, are counted apart (`CpuSplit::outside_ns`): the server's own threads (Kestrel's
//! socket loop, the connection's code before and after its requests), timers, the app's startup.

use std::collections::HashMap;

use clrprof_model::requests::RequestIndex;
use clrprof_model::samples::SampleWeight;
use clrprof_model::stacks::StackId;
use clrprof_model::Profile;
use serde::Serialize;

/// How long after its request's end a sample may be collected and still be the request's: the
/// sampler collects every thread's samples at each of its rounds (every wall tick, at least once
/// a second).
pub const DRAIN_SLACK_NS: u64 = 1_000_000_000;

/// One stack of a request, by CPU time.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RequestStack {
    /// Frames, innermost first (the logical stack where the trace has task events).
    pub stack: Vec<String>,
    pub cpu_ns: u64,
    pub samples: u64,
}

/// The CPU samples of the range, in requests and outside them.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CpuSplit {
    /// CPU time of the samples given to a request, and their count.
    pub in_requests_ns: u64,
    pub in_requests_samples: u64,
    /// CPU time of the samples of no request (no activity id, or an id of no request running),
    /// and their count.
    pub outside_ns: u64,
    pub outside_samples: u64,
}

/// Per request (index in `p.requests.requests`): CPU ns and samples, and its stacks.
pub struct PerRequest {
    pub per_request: Vec<(u64, u64)>,
    stacks: Vec<HashMap<StackId, (u64, u64)>>,
    pub split: CpuSplit,
}

impl PerRequest {
    /// Request `i`'s `n` stacks with the most CPU time.
    pub fn top_stacks(&self, p: &Profile, i: usize, n: usize) -> Vec<RequestStack> {
        let mut v: Vec<(&StackId, &(u64, u64))> = self.stacks[i].iter().collect();
        v.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then(a.0.cmp(b.0)));
        v.into_iter()
            .take(n)
            .map(|(s, &(cpu_ns, samples))| RequestStack {
                stack: crate::weighted_stacks::stack_names(p, *s),
                cpu_ns,
                samples,
            })
            .collect()
    }
}

/// The CPU samples of `p` by request; `None` when no sample carries an activity id.
pub fn per_request(p: &Profile) -> Option<PerRequest> {
    if p.sample_activities.len() < 2 {
        return None;
    }
    let reqs = &p.requests.requests;
    let index = RequestIndex::new(reqs, |_| true);
    let mut out = PerRequest {
        per_request: vec![(0, 0); reqs.len()],
        stacks: vec![HashMap::new(); reqs.len()],
        split: CpuSplit::default(),
    };
    // Owners by (activity index, collection time): a thread's samples of one round share both.
    let mut owners: HashMap<(u32, u64), Option<usize>> = HashMap::new();
    for s in p.samples.iter().filter(|s| s.weight == SampleWeight::Cpu) {
        let owner = if s.flow == 0 {
            None
        } else {
            *owners.entry((s.flow, s.ts)).or_insert_with(|| {
                let id = p.sample_activities.get(s.flow as usize).copied().unwrap_or(0);
                index.owner(reqs, id, s.ts, DRAIN_SLACK_NS)
            })
        };
        match owner {
            Some(i) => {
                out.per_request[i].0 += s.ns;
                out.per_request[i].1 += s.count as u64;
                let e = out.stacks[i].entry(s.stack).or_default();
                e.0 += s.ns;
                e.1 += s.count as u64;
                out.split.in_requests_ns += s.ns;
                out.split.in_requests_samples += s.count as u64;
            }
            None => {
                out.split.outside_ns += s.ns;
                out.split.outside_samples += s.count as u64;
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clrprof_model::requests::Request;
    use clrprof_model::samples::TimedSample;

    fn id(path: &[u8]) -> u128 {
        let mut b = [0u8; 16];
        b[..path.len()].copy_from_slice(path);
        b[12..].copy_from_slice(&[7, 7, 7, 7]);
        u128::from_le_bytes(b)
    }

    #[test]
    fn samples_go_to_the_request_of_their_activity_or_an_ancestor() {
        let mut p = Profile::default();
        let (a, b, nested_b) = (id(&[0x1c, 0x0c]), id(&[0x1c, 0x0d]), id(&[0x1c, 0x0d, 0x10]));
        let req = |start, end, activity| Request {
            start_ns: start,
            end_ns: Some(end),
            activity,
            method: "GET".into(),
            path: "/x".into(),
            ..Default::default()
        };
        // Two requests on one connection (one id), one on another.
        p.requests.requests = vec![req(100, 200, a), req(150, 400, b), req(300, 500, a)];
        p.sample_activities = vec![0, a, b, nested_b, id(&[0x2c])];
        let s1 = p.costs.stacks.intern_frame(clrprof_model::stacks::FrameKey::Label("work".into()));
        let st = p.costs.stacks.intern_stack(&[s1]).unwrap();
        let sample =
            |ts, flow, ns| TimedSample { ts, os_tid: 1, stack: st, weight: SampleWeight::Cpu, count: 1, ns, flow };
        p.samples = vec![
            sample(120, 1, 10),            // a, first request
            sample(210, 1, 20),            // a, collected after its end: still the first request
            sample(320, 1, 40),            // a, the third request
            sample(160, 3, 80),            // nested in b
            sample(170, 4, 160),           // an id of no request
            sample(180, 0, 320),           // no id
            sample(5_000_000_000, 2, 640), // b's id long after b ended
        ];
        let c = per_request(&p).unwrap();
        assert_eq!(c.per_request, vec![(30, 2), (80, 1), (40, 1)]);
        assert_eq!(
            c.split,
            CpuSplit { in_requests_ns: 150, in_requests_samples: 4, outside_ns: 1120, outside_samples: 3 }
        );
        assert_eq!(c.top_stacks(&p, 0, 3), vec![RequestStack { stack: vec!["work".into()], cpu_ns: 30, samples: 2 }]);
        p.sample_activities.clear();
        assert!(per_request(&p).is_none());
    }
}
