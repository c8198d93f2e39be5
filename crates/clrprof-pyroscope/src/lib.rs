//! Continuous profiling into Grafana Pyroscope: live runs' trace bytes in, every interval one
//! pprof profile per kind (CPU, wall, allocations, lock contention, exceptions) out, through
//! Pyroscope's HTTP ingest API (`POST /ingest?name=…&from=…&until=…&format=pprof`) — or, with
//! [`Format::Otlp`], one OpenTelemetry profiles request per interval to an OTLP/HTTP receiver.
//!
//! Three parts, so that a slow or dead Pyroscope never slows the caller:
//! - intake ([`Pyroscope::run_data`]) only appends bytes to the run's pending buffer;
//! - a builder thread decodes pending bytes as they come ([`RunPusher`]) and, every interval,
//!   builds the interval's profiles and offers them to a bounded queue (full: the push is dropped,
//!   counted and logged);
//! - a sender thread posts the queue's pushes, retrying failures with backoff.
#![forbid(unsafe_code)]

mod http;
mod run;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub use http::{Endpoint, UrlError};
pub use run::{app_name, labels, process_name, Format, Kind, Push, RunPusher, KINDS};

/// How profiles are pushed.
#[derive(Clone, Debug)]
pub struct Config {
    pub endpoint: Endpoint,
    /// Pyroscope's pprof ingest, or OTLP profiles.
    pub format: Format,
    /// Length of a pushed window (default 10 s).
    pub interval: Duration,
    /// How long after the end of a window its records may still arrive (the agent flushes every
    /// 50 ms by default; the collector may buffer): the window is pushed this much later. Default 2 s.
    pub lag: Duration,
    /// Pushes waiting to be sent; more are dropped (default 16).
    pub queue: usize,
    /// Retries of a failed push (connection error, 5xx, 429), with doubling backoff from
    /// `backoff` (default 3 retries, 500 ms).
    pub retries: u32,
    pub backoff: Duration,
    /// Connect, write and read timeout of one request (default 10 s).
    pub timeout: Duration,
    /// Threads building windows when several runs are due at once (default: the machine's cores,
    /// at most 4).
    pub workers: usize,
}

impl Config {
    pub fn new(endpoint: Endpoint) -> Config {
        Config {
            endpoint,
            format: Format::Pyroscope,
            interval: Duration::from_secs(10),
            lag: Duration::from_secs(2),
            queue: 16,
            retries: 3,
            backoff: Duration::from_millis(500),
            timeout: Duration::from_secs(10),
            workers: std::thread::available_parallelism().map_or(1, |n| n.get()).min(4),
        }
    }
}

/// What happened to the pushes so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Profiles accepted by Pyroscope (2xx).
    pub sent: u64,
    /// Profiles dropped because the queue was full (Pyroscope slower than the runs).
    pub dropped: u64,
    /// Profiles given up: retries exhausted, refused (4xx), or still queued at shutdown.
    pub failed: u64,
    /// Retried requests.
    pub retries: u64,
    /// Bytes of profiles sent.
    pub bytes_sent: u64,
    /// Windows built (one per run and interval, and one at each run's end).
    pub windows: u64,
    /// Profiles built (one per kind with samples in a window).
    pub built: u64,
    /// Time spent building and encoding profiles, ns.
    pub build_ns: u64,
    /// Windows built more than one interval after they were due (building every run's windows
    /// took longer than the interval: the machine or the number of runs is too much).
    pub late: u64,
}

#[derive(Default)]
struct Counters {
    sent: AtomicU64,
    dropped: AtomicU64,
    failed: AtomicU64,
    retries: AtomicU64,
    bytes_sent: AtomicU64,
    windows: AtomicU64,
    built: AtomicU64,
    build_ns: AtomicU64,
    late: AtomicU64,
}

/// Wall-clock time as ns since the Unix epoch (replaceable in tests).
pub type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;
/// Where diagnostics go (the collector's log).
pub type Log = Arc<dyn Fn(&str) + Send + Sync>;

pub fn system_clock() -> Clock {
    Arc::new(|| SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0))
}

struct Run {
    pending: Mutex<Vec<u8>>,
    ended: AtomicBool,
    pusher: Mutex<RunPusher>,
}

struct Shared {
    cfg: Config,
    runs: Mutex<HashMap<u64, Arc<Run>>>,
    stop: AtomicBool,
    /// At shutdown: when queued pushes are given up.
    abandon_at: Mutex<Option<Instant>>,
    wake: (Mutex<bool>, Condvar),
    counters: Counters,
    log: Log,
    clock: Clock,
}

impl Shared {
    fn stats(&self) -> Stats {
        let c = &self.counters;
        Stats {
            sent: c.sent.load(Ordering::Relaxed),
            dropped: c.dropped.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
            retries: c.retries.load(Ordering::Relaxed),
            bytes_sent: c.bytes_sent.load(Ordering::Relaxed),
            windows: c.windows.load(Ordering::Relaxed),
            built: c.built.load(Ordering::Relaxed),
            build_ns: c.build_ns.load(Ordering::Relaxed),
            late: c.late.load(Ordering::Relaxed),
        }
    }

    /// Sleeps up to `d`, or until woken (a run ended, shutdown).
    fn sleep(&self, d: Duration) {
        let (m, cv) = &self.wake;
        let mut woken = m.lock().unwrap_or_else(|e| e.into_inner());
        if !*woken {
            woken = cv.wait_timeout(woken, d).unwrap_or_else(|e| e.into_inner()).0;
        }
        *woken = false;
    }

    fn wake(&self) {
        let (m, cv) = &self.wake;
        *m.lock().unwrap_or_else(|e| e.into_inner()) = true;
        cv.notify_all();
    }
}

/// Live runs pushed to Pyroscope.
pub struct Pyroscope {
    shared: Arc<Shared>,
    threads: Mutex<Threads>,
}

#[derive(Default)]
struct Threads {
    builder: Option<JoinHandle<()>>,
    sender: Option<JoinHandle<()>>,
}

impl Pyroscope {
    /// Starts the builder and sender threads with the system clock; diagnostics go to `log`.
    pub fn start(cfg: Config, log: Log) -> std::io::Result<Pyroscope> {
        Pyroscope::with_clock(cfg, log, system_clock())
    }

    pub fn with_clock(cfg: Config, log: Log, clock: Clock) -> std::io::Result<Pyroscope> {
        let (tx, rx) = sync_channel::<Push>(cfg.queue.max(1));
        let shared = Arc::new(Shared {
            cfg,
            runs: Mutex::new(HashMap::new()),
            stop: AtomicBool::new(false),
            abandon_at: Mutex::new(None),
            wake: (Mutex::new(false), Condvar::new()),
            counters: Counters::default(),
            log,
            clock,
        });
        let s = shared.clone();
        let builder = std::thread::Builder::new().name("pyroscope-build".into()).spawn(move || build_loop(&s, tx))?;
        let s = shared.clone();
        let sender = std::thread::Builder::new().name("pyroscope-send".into()).spawn(move || send_loop(&s, rx))?;
        Ok(Pyroscope { shared, threads: Mutex::new(Threads { builder: Some(builder), sender: Some(sender) }) })
    }

    /// A new live run.
    pub fn run_started(&self, run: u64) {
        let r = Arc::new(Run {
            pending: Mutex::new(Vec::new()),
            ended: AtomicBool::new(false),
            pusher: Mutex::new(RunPusher::with_format(self.shared.cfg.format)),
        });
        self.shared.runs.lock().unwrap_or_else(|e| e.into_inner()).insert(run, r);
    }

    /// The next bytes of a run's trace. Never blocks on Pyroscope: a copy into the run's buffer.
    pub fn run_data(&self, run: u64, bytes: &[u8]) {
        let r = self.shared.runs.lock().unwrap_or_else(|e| e.into_inner()).get(&run).cloned();
        if let Some(r) = r {
            r.pending.lock().unwrap_or_else(|e| e.into_inner()).extend_from_slice(bytes);
        }
    }

    /// The run ended: what was not pushed yet is pushed now.
    pub fn run_ended(&self, run: u64) {
        if let Some(r) = self.shared.runs.lock().unwrap_or_else(|e| e.into_inner()).get(&run) {
            r.ended.store(true, Ordering::Release);
        }
        self.shared.wake();
    }

    pub fn stats(&self) -> Stats {
        self.shared.stats()
    }

    /// Pushes what every run has not pushed yet, waits up to `wait` for the queue to be sent, and
    /// stops. Pushes still queued then are counted as failed.
    pub fn shutdown(self, wait: Duration) -> Stats {
        self.stop(wait)
    }

    /// [`Pyroscope::shutdown`] through a shared reference (a signal handler's thread); later
    /// calls only return the figures.
    pub fn stop(&self, wait: Duration) -> Stats {
        let mut threads = self.threads.lock().unwrap_or_else(|e| e.into_inner());
        let deadline = Instant::now() + wait;
        *self.shared.abandon_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(deadline);
        for r in self.shared.runs.lock().unwrap_or_else(|e| e.into_inner()).values() {
            r.ended.store(true, Ordering::Release);
        }
        self.shared.stop.store(true, Ordering::Release);
        self.shared.wake();
        if let Some(b) = threads.builder.take() {
            let _ = b.join();
        }
        // The sender ends once the queue is empty (the builder dropped its end of the queue) or
        // the deadline passed; a request in flight to an unresponsive Pyroscope ends by its own
        // timeout, and is not waited for.
        while threads.sender.as_ref().is_some_and(|s| !s.is_finished()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        if let Some(s) = threads.sender.take() {
            if s.is_finished() {
                let _ = s.join();
            }
        }
        self.shared.stats()
    }
}

impl Drop for Pyroscope {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(0));
    }
}

fn build_loop(s: &Shared, tx: SyncSender<Push>) {
    let interval = s.cfg.interval.max(Duration::from_millis(10));
    let interval_ns = interval.as_nanos() as u64;
    let poll = interval.min(Duration::from_millis(100));
    let lag = s.cfg.lag.as_nanos() as u64;
    let mut next = (s.clock)().saturating_add(interval_ns);
    let drops_logged = AtomicU64::new(0);
    let late_logged = AtomicU64::new(0);
    loop {
        let stopping = s.stop.load(Ordering::Acquire);
        let now = (s.clock)();
        let due = now >= next;
        if due {
            next = now.saturating_add(interval_ns);
        }
        let runs: Vec<(u64, Arc<Run>)> =
            s.runs.lock().unwrap_or_else(|e| e.into_inner()).iter().map(|(k, v)| (*k, v.clone())).collect();
        // Runs are built by up to `workers` threads, each taking the next run not taken yet.
        let workers = s.cfg.workers.max(1).min(runs.len());
        let taken = std::sync::atomic::AtomicUsize::new(0);
        let work = |tx: SyncSender<Push>| loop {
            let i = taken.fetch_add(1, Ordering::Relaxed);
            let Some((id, r)) = runs.get(i) else { return };
            let w = Window { due, now, lag, stopping, workers };
            build_run(s, *id, r, &w, &tx, &drops_logged, &late_logged);
        };
        if workers <= 1 {
            work(tx.clone());
        } else {
            std::thread::scope(|scope| {
                let work = &work;
                for _ in 1..workers {
                    let tx = tx.clone();
                    // Without another thread, this one does the work alone.
                    let _ = std::thread::Builder::new()
                        .name("pyroscope-build".into())
                        .spawn_scoped(scope, move || work(tx));
                }
                work(tx.clone());
            });
        }
        if stopping {
            return;
        }
        s.sleep(poll);
    }
}

/// What one tick of the builder does: build windows (`due`) at `now`, `lag` behind.
struct Window {
    due: bool,
    now: u64,
    lag: u64,
    stopping: bool,
    workers: usize,
}

/// Feeds a run its pending bytes and, when due or ended, builds its window and queues it. A window
/// finished more than one interval after its tick began (on the clock: building the runs before it
/// and itself took that long) is late: counted, and logged at the 1st, 10th, 100th… late window.
fn build_run(
    s: &Shared,
    id: u64,
    r: &Run,
    w: &Window,
    tx: &SyncSender<Push>,
    drops_logged: &AtomicU64,
    late_logged: &AtomicU64,
) {
    let bytes = std::mem::take(&mut *r.pending.lock().unwrap_or_else(|e| e.into_inner()));
    let ended = r.ended.load(Ordering::Acquire);
    let mut p = r.pusher.lock().unwrap_or_else(|e| e.into_inner());
    if !bytes.is_empty() {
        if let Some(e) = p.feed(&bytes) {
            (s.log)(&format!("run {id}: the trace is damaged ({e}); pushing what came before"));
        }
    }
    if !(w.due || ended) {
        return;
    }
    let t = Instant::now();
    let pushes = if ended { p.finish() } else { p.due(w.now, w.lag) };
    drop(p);
    // Read before the window is counted (a test's clock moves once it is).
    let behind = if ended { 0 } else { (s.clock)().saturating_sub(w.now) };
    s.counters.build_ns.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
    s.counters.built.fetch_add(pushes.len() as u64, Ordering::Relaxed);
    s.counters.windows.fetch_add(1, Ordering::Relaxed);
    for push in pushes {
        offer(s, tx, push, w.stopping, drops_logged);
    }
    if ended {
        s.runs.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
        return;
    }
    let interval = s.cfg.interval.max(Duration::from_millis(10));
    if behind > interval.as_nanos() as u64 {
        let n = s.counters.late.fetch_add(1, Ordering::Relaxed) + 1;
        let l = late_logged.load(Ordering::Relaxed);
        if (l == 0 || n >= l * 10) && late_logged.compare_exchange(l, n, Ordering::Relaxed, Ordering::Relaxed).is_ok() {
            (s.log)(&format!(
                "Pyroscope windows are late: run {id}'s window was built {} ms after it was due (interval {} ms, \
                 {} runs, {} build threads); {n} late windows so far",
                behind / 1_000_000,
                interval.as_millis(),
                s.runs.lock().unwrap_or_else(|e| e.into_inner()).len(),
                w.workers
            ));
        }
    }
}

/// Queues a push; a full queue drops it (counted, logged at 1, 10, 100, … drops). At shutdown it
/// waits for room until the deadline instead.
fn offer(s: &Shared, tx: &SyncSender<Push>, push: Push, stopping: bool, logged: &AtomicU64) {
    let mut push = push;
    loop {
        match tx.try_send(push) {
            Ok(()) => return,
            Err(TrySendError::Full(p)) if stopping && !s.abandoned() => {
                push = p;
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(TrySendError::Full(p)) | Err(TrySendError::Disconnected(p)) => {
                let n = s.counters.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                let l = logged.load(Ordering::Relaxed);
                if (l == 0 || n >= l * 10)
                    && logged.compare_exchange(l, n, Ordering::Relaxed, Ordering::Relaxed).is_ok()
                {
                    (s.log)(&format!(
                        "Pyroscope is not keeping up: dropped {} ({n} so far; queue of {})",
                        p.name, s.cfg.queue
                    ));
                }
                return;
            }
        }
    }
}

impl Shared {
    /// Past the shutdown deadline: what is still queued is given up.
    fn abandoned(&self) -> bool {
        self.abandon_at.lock().unwrap_or_else(|e| e.into_inner()).is_some_and(|d| Instant::now() >= d)
    }

    /// Sleeps `d` unless the shutdown deadline passes first; false if it did.
    fn backoff(&self, d: Duration) -> bool {
        let end = Instant::now() + d;
        while Instant::now() < end {
            if self.abandoned() {
                return false;
            }
            std::thread::sleep((end - Instant::now()).min(Duration::from_millis(20)));
        }
        !self.abandoned()
    }
}

fn send_loop(s: &Shared, rx: Receiver<Push>) {
    let ep = &s.cfg.endpoint;
    for push in rx {
        if s.abandoned() {
            s.counters.failed.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let target = push.target(ep);
        let mut wait = s.cfg.backoff;
        let mut attempt = 0;
        loop {
            let r = ep.post(&target, push.content_type(), &push.body, s.cfg.timeout);
            let retry = match &r {
                Ok((code, _)) if (200..300).contains(code) => {
                    s.counters.sent.fetch_add(1, Ordering::Relaxed);
                    s.counters.bytes_sent.fetch_add(push.body.len() as u64, Ordering::Relaxed);
                    break;
                }
                Ok((code, _)) => *code == 429 || *code >= 500,
                Err(_) => true,
            };
            let why = match r {
                Ok((code, body)) => format!("HTTP {code} {body}"),
                Err(e) => e.to_string(),
            };
            if !retry || attempt >= s.cfg.retries || !s.backoff(wait) {
                s.counters.failed.fetch_add(1, Ordering::Relaxed);
                (s.log)(&format!("cannot push {} to {}:{}: {why}; given up", push.name, ep.host, ep.port));
                break;
            }
            attempt += 1;
            s.counters.retries.fetch_add(1, Ordering::Relaxed);
            wait = wait.saturating_mul(2);
        }
    }
}
