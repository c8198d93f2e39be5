//! The pusher's threads against loopback receivers: a healthy one gets every interval's profiles
//! with the right query, a dead one makes every push fail after its retries, and an unresponsive
//! one fills the bounded queue — the rest is dropped and counted, and intake never waits on it.

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::channel;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clrprof_pyroscope::{Config, Endpoint, Log, Pyroscope, RunPusher};

mod support;
use support::receiver;

fn trace_bytes(name: &str) -> Vec<u8> {
    std::fs::read(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../../testdata/traces/v1/{name}.clrprof")))
        .unwrap()
}

/// The sampled trace's ProcessStart time (ns since the epoch) and duration.
fn sampled_times() -> (u64, u64) {
    let b = clrprof_load::source::Loader::load(clrprof_trace::TraceSource::File(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/traces/v1/sampled.clrprof"),
    ))
    .unwrap()
    .0;
    let p = b.profile(clrprof_model::TimeRange::ALL, &mut clrprof_model::NoSymbols);
    (p.process.start_unix_ns, p.process.duration_ns)
}

fn logs() -> (Log, Arc<Mutex<Vec<String>>>) {
    let lines: Arc<Mutex<Vec<String>>> = Arc::default();
    let l = lines.clone();
    (Arc::new(move |m: &str| l.lock().unwrap().push(m.to_string())), lines)
}

fn config(port: u16) -> Config {
    let mut c = Config::new(Endpoint::parse(&format!("http://127.0.0.1:{port}/prefix"), Some("u:p")).unwrap());
    c.interval = Duration::from_millis(10);
    c.lag = Duration::ZERO;
    c.backoff = Duration::from_millis(10);
    c
}

/// Feeds the sampled trace while the test's clock walks through the run in `steps` windows.
fn feed(p: &Pyroscope, clock: &AtomicU64, steps: u64) {
    let (start, duration) = sampled_times();
    p.run_started(1);
    for c in trace_bytes("sampled").chunks(4096) {
        p.run_data(1, c);
    }
    for k in 1..=steps {
        step(p, clock, start + duration * k / steps);
    }
    p.run_ended(1);
}

/// Moves the clock and waits for the builder to push the window up to it.
fn step(p: &Pyroscope, clock: &AtomicU64, to: u64) {
    let before = p.stats().windows;
    clock.store(to, Ordering::SeqCst);
    let t = std::time::Instant::now();
    while p.stats().windows == before {
        assert!(t.elapsed() < Duration::from_secs(60), "the builder never pushed the window");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn every_interval_reaches_a_healthy_receiver() {
    let (port, got) = receiver();
    let clock = Arc::new(AtomicU64::new(0));
    let c = clock.clone();
    let (log, lines) = logs();
    let p = Pyroscope::with_clock(config(port), log, Arc::new(move || c.load(Ordering::SeqCst))).unwrap();
    feed(&p, &clock, 5);
    let stats = p.shutdown(Duration::from_secs(20));
    let got = got.lock().unwrap();
    assert_eq!(stats.sent as usize, got.len(), "{stats:?} {:?}", lines.lock().unwrap());
    assert_eq!((stats.dropped, stats.failed), (0, 0), "{stats:?}");
    let cpu: Vec<&String> = got.iter().map(|r| &r.0).filter(|l| l.contains("name=Sampling.cpu")).collect();
    assert_eq!(stats.windows, 6, "5 steps and the run's end: {stats:?}");
    assert!(cpu.len() >= 4, "one cpu profile per window with samples: {cpu:?}");
    for line in got.iter() {
        assert!(line.0.starts_with("POST /prefix/ingest?name=Sampling."), "{}", line.0);
        assert!(line.0.contains("&format=pprof&") && line.0.ends_with(" HTTP/1.1"), "{}", line.0);
        assert_eq!(&line.2[..2], &[0x1f, 0x8b], "gzip-compressed pprof");
    }
}

#[test]
fn a_dead_pyroscope_fails_every_push_after_its_retries() {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let clock = Arc::new(AtomicU64::new(0));
    let c = clock.clone();
    let (log, lines) = logs();
    let mut cfg = config(port);
    cfg.retries = 2;
    cfg.queue = 64;
    let p = Pyroscope::with_clock(cfg, log, Arc::new(move || c.load(Ordering::SeqCst))).unwrap();
    feed(&p, &clock, 3);
    let stats = p.shutdown(Duration::from_secs(20));
    assert!(stats.built >= 3, "{stats:?}");
    assert_eq!((stats.sent, stats.dropped, stats.failed), (0, 0, stats.built), "{stats:?}");
    assert_eq!(stats.retries, 2 * stats.built, "{stats:?}");
    let lines = lines.lock().unwrap();
    assert_eq!(lines.iter().filter(|l| l.contains("given up")).count() as u64, stats.built, "{lines:?}");
    assert!(lines[0].starts_with("cannot push Sampling."), "{lines:?}");
}

#[test]
fn an_unresponsive_pyroscope_fills_the_queue_and_never_blocks_intake() {
    // Accepts connections and never answers (until the test ends).
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let (accepted_tx, accepted) = channel::<()>();
    let held: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
    let h = held.clone();
    std::thread::spawn(move || {
        for s in l.incoming() {
            h.lock().unwrap().push(s.unwrap());
            let _ = accepted_tx.send(());
        }
    });
    let clock = Arc::new(AtomicU64::new(0));
    let c = clock.clone();
    let (log, lines) = logs();
    let mut cfg = config(port);
    cfg.queue = 2;
    cfg.timeout = Duration::from_secs(60);
    let p = Pyroscope::with_clock(cfg, log, Arc::new(move || c.load(Ordering::SeqCst))).unwrap();
    let (start, duration) = sampled_times();
    p.run_started(1);
    let bytes = trace_bytes("sampled");
    let (first, rest) = bytes.split_at(bytes.len() / 2);
    p.run_data(1, first);
    clock.store(start + duration / 2, Ordering::SeqCst);
    // The sender is now stuck in its first request.
    accepted.recv_timeout(Duration::from_secs(30)).expect("the first push reached the receiver");
    // Intake goes on: the rest of the run, window after window, while the sender waits.
    for c in rest.chunks(1000) {
        p.run_data(1, c);
    }
    for k in 1..=10 {
        step(&p, &clock, start + duration / 2 + duration * k / 10);
    }
    p.run_ended(1);
    let stats = p.shutdown(Duration::from_millis(500));
    // One push in flight, two queued, the others dropped.
    assert_eq!(stats.sent, 0, "{stats:?}");
    assert!(stats.dropped >= 5, "{stats:?}");
    assert!(stats.dropped + 3 >= stats.built, "{stats:?}");
    let lines = lines.lock().unwrap();
    assert!(lines[0].starts_with("Pyroscope is not keeping up: dropped Sampling."), "{lines:?}");
    assert!(lines.len() < stats.dropped as usize, "drops are logged at 1, 10, 100…: {lines:?}");
    assert_eq!(held.lock().unwrap().len(), 1, "one connection at a time");
}

/// Waits until `what` of the stats reaches `n`.
fn wait_for(p: &Pyroscope, what: impl Fn(&clrprof_pyroscope::Stats) -> u64, n: u64) {
    let t = std::time::Instant::now();
    while what(&p.stats()) < n {
        assert!(t.elapsed() < Duration::from_secs(120), "waited for {n}: {:?}", p.stats());
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn many_runs_at_once_are_all_pushed_by_several_threads() {
    const RUNS: u64 = 8;
    const STEPS: u64 = 4;
    let (port, got) = receiver();
    let clock = Arc::new(AtomicU64::new(0));
    let c = clock.clone();
    let (log, lines) = logs();
    let mut cfg = config(port);
    cfg.queue = 1000;
    cfg.workers = 3;
    let p = Pyroscope::with_clock(cfg, log, Arc::new(move || c.load(Ordering::SeqCst))).unwrap();
    let (start, duration) = sampled_times();
    let bytes = trace_bytes("sampled");
    for run in 1..=RUNS {
        p.run_started(run);
        for c in bytes.chunks(4096) {
            p.run_data(run, c);
        }
    }
    for k in 1..=STEPS {
        let before = p.stats().windows;
        clock.store(start + duration * k / STEPS, Ordering::SeqCst);
        wait_for(&p, |s| s.windows, before + RUNS);
    }
    for run in 1..=RUNS {
        p.run_ended(run);
    }
    let stats = p.shutdown(Duration::from_secs(60));
    // The same windows of one run built alone.
    let mut one = RunPusher::new();
    assert_eq!(one.feed(&bytes), None);
    let mut expected = 0;
    for k in 1..=STEPS {
        expected += one.due(start + duration * k / STEPS, 0).len() as u64;
    }
    expected += one.finish().len() as u64;
    assert!(expected >= STEPS, "{expected}");
    assert_eq!(stats.windows, RUNS * (STEPS + 1), "{stats:?}");
    assert_eq!(stats.built, RUNS * expected, "{stats:?}");
    // The clock stood still while the windows were built: none was late.
    assert_eq!((stats.sent, stats.dropped, stats.failed, stats.late), (stats.built, 0, 0, 0), "{stats:?} {lines:?}");
    assert_eq!(got.lock().unwrap().len() as u64, stats.sent);
}

#[test]
fn windows_built_more_than_an_interval_late_are_counted_and_logged() {
    let (port, _got) = receiver();
    let (start, _) = sampled_times();
    // A clock 25 ms further on at every reading: a window is built at least 25 ms after its tick
    // began, more than the 10 ms interval.
    let reads = Arc::new(AtomicU64::new(0));
    let r = reads.clone();
    let clock = Arc::new(move || start + r.fetch_add(1, Ordering::SeqCst) * 25_000_000);
    let (log, lines) = logs();
    let mut cfg = config(port);
    cfg.queue = 1000;
    let p = Pyroscope::with_clock(cfg, log, clock).unwrap();
    let bytes = trace_bytes("sampled");
    for run in [1, 2] {
        p.run_started(run);
        for c in bytes.chunks(4096) {
            p.run_data(run, c);
        }
    }
    wait_for(&p, |s| s.late, 12);
    let stats = p.shutdown(Duration::from_secs(60));
    assert!(stats.late >= 12 && stats.late <= stats.windows, "{stats:?}");
    let lines = lines.lock().unwrap();
    let late: Vec<&String> = lines.iter().filter(|l| l.starts_with("Pyroscope windows are late: run ")).collect();
    // Logged at the 1st, 10th, 100th… late window.
    assert!(!late.is_empty() && (late.len() as u64) < stats.late, "{stats:?} {lines:?}");
    assert!(
        late[0].contains("(interval 10 ms, 2 runs, 1 build threads)") || late[0].contains("2 build threads"),
        "{late:?}"
    );
}
