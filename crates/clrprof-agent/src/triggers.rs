//! Collection triggers (`CLRPROF_TRIGGER`, docs/triggers.md): rules on what the process does —
//! a throw of an exception type, a long GC pause, sustained CPU, a slow 95th percentile of
//! requests — that, when met, keep a high-rate CPU sampling window around the moment or take a
//! heap snapshot, at most `CLRPROF_TRIGGER_MAX` times per rule and never twice within
//! `CLRPROF_TRIGGER_COOLDOWN`.
//!
//! The runtime's threads only observe: a matching throw (EventPipe `ExceptionThrown_V1`, seen
//! even while the exception callbacks are paused in a storm), a GC suspension's length, a
//! request's start and stop are pushed to a bounded queue under a short lock. The trigger thread
//! ([`start`]) decides ([`Engine`], pure and tested here), writes `TriggerFired` and
//! `TriggerEnded`, and acts: the sampler's CPU timers are re-armed at the trigger rate for the
//! window and back, or a heap snapshot is taken on that thread.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use clrprof_trace::trigger::{p95, Action, Rule, P95_MIN_REQUESTS, P95_WINDOW_NS};
use clrprof_trace::{TriggerEnded, TriggerFired};

use crate::config::TriggerConfig;
use crate::context::Context;
use crate::{log_info, log_warn};

/// Observations waiting for the trigger thread, at most; more are dropped and counted.
const MAX_QUEUED: usize = 8192;
/// How often the trigger thread looks at the queue.
const TICK: Duration = Duration::from_millis(10);
/// How often CPU and request percentiles are judged.
const MEASURE_NS: u64 = 100_000_000;
/// Requests remembered as started, at most (a stop never seen must not grow the table forever).
const MAX_OPEN_REQUESTS: usize = 1 << 16;

/// What a runtime thread saw.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Observation {
    /// A throw matching rule `rule`.
    Throw {
        ts: u64,
        rule: usize,
    },
    /// A GC suspension that lasted `ns`, ended at `ts`.
    GcPause {
        ts: u64,
        ns: u64,
    },
    RequestStart {
        ts: u64,
        activity: u128,
    },
    RequestStop {
        ts: u64,
        activity: u128,
    },
}

/// The observing side, in the recorders' context.
pub(crate) struct Triggers {
    /// The exception rules' type names as UTF-16LE bytes, with their rule's index.
    exception_names: Vec<(usize, Vec<u8>)>,
    gc: bool,
    requests: bool,
    queue: Mutex<Vec<Observation>>,
    pub(crate) dropped: AtomicU64,
    /// When the GC suspension in progress began (0: none).
    suspended_at: AtomicU64,
}

impl Triggers {
    pub(crate) fn new(c: &TriggerConfig) -> Triggers {
        let exception_names = c
            .rules
            .iter()
            .enumerate()
            .filter_map(|(i, r)| match r {
                Rule::Exception(name) => Some((i, name.encode_utf16().flat_map(|u| u.to_le_bytes()).collect())),
                _ => None,
            })
            .collect();
        Triggers {
            exception_names,
            gc: c.rules.iter().any(|r| matches!(r, Rule::GcPause(_))),
            requests: c.rules.iter().any(|r| matches!(r, Rule::RequestP95(_))),
            queue: Mutex::new(Vec::new()),
            dropped: AtomicU64::new(0),
            suspended_at: AtomicU64::new(0),
        }
    }

    /// Whether `ExceptionThrown_V1` events are needed.
    pub(crate) fn wants_exceptions(&self) -> bool {
        !self.exception_names.is_empty()
    }

    fn push(&self, o: Observation) {
        match self.queue.lock() {
            Ok(mut q) if q.len() < MAX_QUEUED => q.push(o),
            _ => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// `ExceptionThrown_V1` {UTF-16z ExceptionType, …}; `rethrow` from its flags (a rethrow is the
    /// same exception again: not a new throw).
    pub(crate) fn exception_thrown(&self, ts: u64, payload: &[u8], rethrow: bool) {
        if self.exception_names.is_empty() || rethrow {
            return;
        }
        let end = payload.chunks_exact(2).position(|c| c == [0, 0]).map_or(payload.len() & !1, |i| 2 * i);
        let name = &payload[..end];
        for (rule, n) in &self.exception_names {
            if n.as_slice() == name {
                self.push(Observation::Throw { ts, rule: *rule });
            }
        }
    }

    /// The runtime began a suspension for a GC.
    pub(crate) fn gc_suspended(&self, ts: u64) {
        if self.gc {
            self.suspended_at.store(ts.max(1), Ordering::Relaxed);
        }
    }

    /// The runtime resumed.
    pub(crate) fn resumed(&self, ts: u64) {
        if !self.gc {
            return;
        }
        let at = self.suspended_at.swap(0, Ordering::Relaxed);
        if at != 0 {
            self.push(Observation::GcPause { ts, ns: ts.saturating_sub(at) });
        }
    }

    pub(crate) fn request_started(&self, ts: u64, activity: u128) {
        if self.requests {
            self.push(Observation::RequestStart { ts, activity });
        }
    }

    pub(crate) fn request_stopped(&self, ts: u64, activity: u128) {
        if self.requests {
            self.push(Observation::RequestStop { ts, activity });
        }
    }

    fn take(&self) -> Vec<Observation> {
        self.queue.lock().map(|mut q| std::mem::take(&mut *q)).unwrap_or_default()
    }
}

/// A rule met, when its limits let it fire.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Fire {
    pub(crate) rule: usize,
    pub(crate) ts: u64,
    pub(crate) value: u64,
    pub(crate) detail: String,
}

#[derive(Clone, Copy, Default)]
struct RuleState {
    fired: u32,
    last: Option<u64>,
}

/// The decisions: which observations and measures meet a rule, within the cooldown and the
/// most fires per rule.
pub(crate) struct Engine {
    rules: Vec<Rule>,
    cooldown_ns: u64,
    max: u32,
    state: Vec<RuleState>,
    /// Requests started and not yet stopped, by activity id.
    open: HashMap<u128, u64>,
    /// Requests that ended: (end, duration), oldest first.
    ended: VecDeque<(u64, u64)>,
    /// (time, process CPU ns) every measure, oldest first.
    cpu: VecDeque<(u64, u64)>,
}

impl Engine {
    pub(crate) fn new(c: &TriggerConfig) -> Engine {
        Engine {
            rules: c.rules.clone(),
            cooldown_ns: c.cooldown_ns,
            max: c.max,
            state: vec![RuleState::default(); c.rules.len()],
            open: HashMap::new(),
            ended: VecDeque::new(),
            cpu: VecDeque::new(),
        }
    }

    /// Whether rule `i` may fire at `ts`; if so it is counted as fired.
    fn allow(&mut self, i: usize, ts: u64) -> bool {
        let (max, cooldown) = (self.max, self.cooldown_ns);
        let Some(st) = self.state.get_mut(i) else { return false };
        if st.fired >= max || st.last.is_some_and(|l| ts.saturating_sub(l) < cooldown) {
            return false;
        }
        st.fired += 1;
        st.last = Some(ts);
        true
    }

    /// Whether rule `i` could fire at `ts` (without counting it).
    fn could(&self, i: usize, ts: u64) -> bool {
        self.state
            .get(i)
            .is_some_and(|st| st.fired < self.max && st.last.is_none_or(|l| ts.saturating_sub(l) >= self.cooldown_ns))
    }

    pub(crate) fn observe(&mut self, o: Observation, out: &mut Vec<Fire>) {
        match o {
            Observation::Throw { ts, rule } => {
                if let Some(Rule::Exception(name)) = self.rules.get(rule) {
                    let detail = format!("{name} thrown");
                    if self.allow(rule, ts) {
                        out.push(Fire { rule, ts, value: 1, detail });
                    }
                }
            }
            Observation::GcPause { ts, ns } => {
                for i in 0..self.rules.len() {
                    if let Rule::GcPause(limit) = self.rules[i] {
                        if ns > limit && self.allow(i, ts) {
                            let detail = format!("GC pause of {:.1} ms", ns as f64 / 1e6);
                            out.push(Fire { rule: i, ts, value: ns, detail });
                        }
                    }
                }
            }
            Observation::RequestStart { ts, activity } => {
                if self.open.len() < MAX_OPEN_REQUESTS {
                    self.open.insert(activity, ts);
                }
            }
            Observation::RequestStop { ts, activity } => {
                if let Some(start) = self.open.remove(&activity) {
                    self.ended.push_back((ts, ts.saturating_sub(start)));
                }
            }
        }
    }

    /// Judges the measured rules at `now`: CPU with the process's CPU time `cpu_ns`, and the
    /// requests' 95th percentile over the last [`P95_WINDOW_NS`].
    pub(crate) fn measure(&mut self, now: u64, cpu_ns: Option<u64>, out: &mut Vec<Fire>) {
        if let Some(c) = cpu_ns {
            self.cpu.push_back((now, c));
        }
        let longest = self
            .rules
            .iter()
            .filter_map(|r| if let Rule::Cpu { for_ns, .. } = r { Some(*for_ns) } else { None })
            .max()
            .unwrap_or(0);
        // Keep the newest sample at least `longest` old, drop the older ones.
        while self.cpu.len() >= 2 && now.saturating_sub(self.cpu[1].0) >= longest {
            self.cpu.pop_front();
        }
        while self.ended.front().is_some_and(|&(t, _)| now.saturating_sub(t) > P95_WINDOW_NS) {
            self.ended.pop_front();
        }
        let mut p95_now: Option<(u64, usize)> = None;
        for i in 0..self.rules.len() {
            match self.rules[i] {
                Rule::Cpu { percent, for_ns } => {
                    let Some(&(t1, c1)) = self.cpu.back() else { continue };
                    // The newest sample at least `for_ns` before now.
                    let Some(&(t0, c0)) = self.cpu.iter().rev().find(|&&(t, _)| t1.saturating_sub(t) >= for_ns) else {
                        continue;
                    };
                    let share = c1.saturating_sub(c0) as f64 * 100.0 / t1.saturating_sub(t0).max(1) as f64;
                    if share > percent as f64 && self.allow(i, now) {
                        let detail =
                            format!("CPU {share:.0}% of one core over the last {:.1} s", (t1 - t0) as f64 / 1e9);
                        out.push(Fire { rule: i, ts: now, value: share.round() as u64, detail });
                    }
                }
                Rule::RequestP95(limit) => {
                    if self.ended.len() < P95_MIN_REQUESTS || !self.could(i, now) {
                        continue;
                    }
                    let (p, n) = *p95_now.get_or_insert_with(|| {
                        let mut d: Vec<u64> = self.ended.iter().map(|&(_, d)| d).collect();
                        (p95(&mut d).unwrap_or(0), d.len())
                    });
                    if p > limit && self.allow(i, now) {
                        let detail = format!(
                            "request p95 {:.1} ms over {n} requests ended in the last {} s",
                            p as f64 / 1e6,
                            P95_WINDOW_NS / 1_000_000_000
                        );
                        out.push(Fire { rule: i, ts: now, value: p, detail });
                    }
                }
                _ => {}
            }
        }
    }
}

/// What the trigger thread does when a rule fires.
pub(crate) struct Actions {
    /// Sets the CPU sampling rate of every thread (samples per second).
    pub(crate) set_rate: Box<dyn Fn(u32) + Send>,
    /// The run's own rate, to go back to.
    pub(crate) base_rate: u32,
    /// Takes a heap snapshot and returns its number (0: none taken).
    pub(crate) snapshot: Box<dyn Fn() -> u32 + Send>,
}

/// Starts the trigger thread when there are rules.
pub(crate) fn start(s: &'static Context, actions: Actions) {
    if s.config.triggers.rules.is_empty() {
        return;
    }
    let spawned = std::thread::Builder::new().name("clrprof-trigger".into()).spawn(move || {
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(s, &actions))).is_err() {
            log_warn!("triggers: the trigger thread failed; no more triggers");
            (actions.set_rate)(actions.base_rate);
        }
    });
    match spawned {
        Ok(_) => log_info!(
            "triggers: {}",
            s.config.triggers.rules.iter().map(|r| r.to_string()).collect::<Vec<_>>().join("; ")
        ),
        Err(e) => log_warn!("triggers: cannot start their thread ({e}); no triggers"),
    }
}

fn run(s: &'static Context, a: &Actions) {
    let c = &s.config.triggers;
    let mut engine = Engine::new(c);
    let measured = c.rules.iter().any(|r| matches!(r, Rule::Cpu { .. } | Rule::RequestP95(_)));
    let mut last_measure = 0u64;
    let mut seq = 0u32;
    // The window in force: its end and the fires it serves.
    let mut window: Option<(u64, Vec<u32>)> = None;
    let mut fires = Vec::new();
    while !s.is_stopped() {
        std::thread::sleep(TICK);
        for o in s.triggers.take() {
            engine.observe(o, &mut fires);
        }
        let now = s.now();
        if measured && now.saturating_sub(last_measure) >= MEASURE_NS {
            last_measure = now;
            engine.measure(now, crate::os::process_cpu_ns(), &mut fires);
        }
        for f in fires.drain(..) {
            seq += 1;
            let rule = c.rules.get(f.rule).map(|r| r.to_string()).unwrap_or_default();
            log_info!("trigger {seq} fired: {rule}: {}", f.detail);
            s.emit(TriggerFired {
                ts: f.ts,
                seq,
                rule,
                value: f.value,
                detail: f.detail,
                action: c.action.code(),
                rate_hz: if c.action == Action::Window { c.rate_hz } else { 0 },
                window_ns: if c.action == Action::Window { c.window_ns } else { 0 },
            });
            match c.action {
                Action::Window => {
                    let end = s.now() + c.window_ns;
                    match &mut window {
                        Some((e, seqs)) => {
                            *e = (*e).max(end);
                            seqs.push(seq);
                        }
                        None => {
                            (a.set_rate)(c.rate_hz);
                            window = Some((end, vec![seq]));
                        }
                    }
                }
                Action::Heap => {
                    let snapshot = (a.snapshot)();
                    s.emit(TriggerEnded { ts: s.now(), seq, snapshot });
                }
            }
        }
        if window.as_ref().is_some_and(|(end, _)| s.now() >= *end) {
            (a.set_rate)(a.base_rate);
            if let Some((_, seqs)) = window.take() {
                let ts = s.now();
                for seq in seqs {
                    s.emit(TriggerEnded { ts, seq, snapshot: 0 });
                }
            }
        }
    }
    let dropped = s.triggers.dropped.load(Ordering::Relaxed);
    if dropped > 0 {
        log_warn!("triggers: {dropped} observations dropped (the queue was full)");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(rules: &str, cooldown_ns: u64, max: u32) -> TriggerConfig {
        TriggerConfig { rules: Rule::parse_list(rules).unwrap(), cooldown_ns, max, ..Default::default() }
    }

    #[test]
    fn throws_fire_within_cooldown_and_max() {
        let mut e = Engine::new(&config("exception:A;exception:B", 1000, 2));
        let mut out = Vec::new();
        for ts in [10, 20, 1009, 1010, 2500, 4000] {
            e.observe(Observation::Throw { ts, rule: 0 }, &mut out);
        }
        e.observe(Observation::Throw { ts: 30, rule: 1 }, &mut out);
        let got: Vec<(usize, u64)> = out.iter().map(|f| (f.rule, f.ts)).collect();
        assert_eq!(got, vec![(0, 10), (0, 1010), (1, 30)]);
    }

    #[test]
    fn a_throw_is_matched_by_its_full_name_and_rethrows_are_not() {
        let t = Triggers::new(&config("exception:System.TimeoutException", 0, 5));
        let utf16 = |s: &str| -> Vec<u8> { s.encode_utf16().chain([0]).flat_map(|u| u.to_le_bytes()).collect() };
        let mut p = utf16("System.TimeoutException");
        p.extend(utf16("the message"));
        t.exception_thrown(5, &p, false);
        t.exception_thrown(6, &p, true);
        t.exception_thrown(7, &utf16("System.TimeoutExceptionX"), false);
        t.exception_thrown(8, &utf16("System.Timeout"), false);
        assert_eq!(t.take(), vec![Observation::Throw { ts: 5, rule: 0 }]);
    }

    #[test]
    fn gc_pauses_over_the_limit_fire() {
        let t = Triggers::new(&config("gc-pause>50ms", 0, 5));
        t.gc_suspended(100);
        t.resumed(100 + 60_000_000);
        t.resumed(200_000_000); // no suspension in progress
        t.gc_suspended(300_000_000);
        t.resumed(300_000_000 + 40_000_000);
        let mut e = Engine::new(&config("gc-pause>50ms", 0, 5));
        let mut out = Vec::new();
        for o in t.take() {
            e.observe(o, &mut out);
        }
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].value, 60_000_000);
    }

    #[test]
    fn cpu_fires_on_the_average_over_its_duration() {
        let mut e = Engine::new(&config("cpu>50%:1s", 10_000_000_000, 5));
        let mut out = Vec::new();
        let ms = 1_000_000u64;
        // Idle for 2 s, then one busy core.
        let mut cpu = 0;
        for t in (0..=2000).step_by(100) {
            e.measure(t * ms, Some(cpu), &mut out);
        }
        assert!(out.is_empty());
        for t in (2100..=4000).step_by(100) {
            cpu += 100 * ms;
            e.measure(t * ms, Some(cpu), &mut out);
        }
        // Over 50% once 0.6 s of the last 1 s were busy: at 2.6 s; then the cooldown.
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].ts, 2600 * ms);
        assert_eq!(out[0].value, 60);
    }

    #[test]
    fn request_p95_needs_enough_requests_and_a_slow_tail() {
        let mut e = Engine::new(&config("request-p95>200ms", 0, 1));
        let mut out = Vec::new();
        let ms = 1_000_000u64;
        let mut id = 0u128;
        let mut request = |e: &mut Engine, start: u64, dur: u64| {
            id += 1;
            e.observe(Observation::RequestStart { ts: start, activity: id }, &mut Vec::new());
            e.observe(Observation::RequestStop { ts: start + dur, activity: id }, &mut Vec::new());
        };
        for i in 0..19 {
            request(&mut e, i * ms, 10 * ms);
        }
        e.measure(1000 * ms, None, &mut out);
        assert!(out.is_empty(), "19 requests are too few");
        // 100 requests, 4 slow: p95 is fast.
        for i in 0..81 {
            request(&mut e, 600 * ms + i * ms, if i < 4 { 900 * ms } else { 10 * ms });
        }
        e.measure(1100 * ms, None, &mut out);
        assert!(out.is_empty(), "{out:?}");
        // 30 more slow ones: now more than 5% are slow.
        for i in 0..30 {
            request(&mut e, 1200 * ms + i * ms, 300 * ms);
        }
        e.measure(2000 * ms, None, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].value, 300 * ms);
        // Ten seconds later the window holds none of them.
        e.measure(13_000 * ms, None, &mut out);
        assert_eq!(out.len(), 1);
    }
}
