//! A run of two hours pushed in 10-second windows keeps a bounded builder: a real recorded trace
//! (testdata/traces/v1) is replayed 720 times, each repetition's samples and events shifted by
//! 10 s, as one live run. Every window holds exactly one repetition, so every window pushes the
//! same kinds with the same sample counts; the records retained stay those of one window; and the
//! first windows' bodies are byte for byte those of a pusher that keeps the whole run (what the
//! pusher did before it forgot; its windows add up to the whole run in tests/windows.rs).

use std::path::PathBuf;

use clrprof_pyroscope::{Push, RunPusher};
use clrprof_trace::Record;

/// One repetition every 10 s; windows of 10 s; 720 windows: two hours.
const PERIOD: u64 = 10_000_000_000;
const WINDOWS: u64 = 720;
/// Windows compared byte for byte with a pusher that keeps everything (its cost grows with the
/// run: it is the thing being fixed).
const COMPARED: u64 = 20;
const LAG: u64 = 1_000_000_000;

fn trace(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../../testdata/traces/v1/{name}.clrprof"))
}

/// Shifts a per-sample or per-event record by `d`; false for the others (definitions, names).
fn shift(r: &mut Record, d: u64) -> bool {
    use Record as R;
    let ts = match r {
        R::CpuSample(x) => &mut x.ts,
        R::WallSample(x) => &mut x.ts,
        R::ExceptionThrown(x) => &mut x.ts,
        R::ExceptionPhase(x) => &mut x.ts,
        R::ExceptionCaught(x) => &mut x.ts,
        R::GcStarted(x) => &mut x.ts,
        R::GcFinished(x) => &mut x.ts,
        R::GcInfo(x) => &mut x.ts,
        R::RuntimeSuspended(x) => &mut x.ts,
        R::RuntimeResumed(x) => &mut x.ts,
        R::AllocationCounts(x) => &mut x.ts,
        R::AllocationSample(x) => &mut x.ts,
        R::ContentionStarted(x) => &mut x.ts,
        R::ContentionEnded(x) => &mut x.ts,
        R::ContentionCounts(x) => &mut x.ts,
        R::ExceptionCounts(x) => &mut x.ts,
        R::AllocationSamples(x) => &mut x.ts,
        R::CallTreeDelta(x) => &mut x.ts,
        R::CallTreeCosts(x) => &mut x.ts,
        _ => return false,
    };
    *ts += d;
    true
}

/// The trace's definitions (without its end) and its per-event records.
fn split(name: &str) -> (Vec<Record>, Vec<Record>) {
    let (records, _) = clrprof_trace::read_all(std::fs::File::open(trace(name)).unwrap()).unwrap();
    let (mut head, mut events) = (Vec::new(), Vec::new());
    for mut r in records {
        if matches!(
            r,
            Record::ProcessExit(_) | Record::AgentStop(_) | Record::ExceptionMonitoring(_) | Record::ExceptionCount(_)
        ) {
            // The run goes on; the runtime's cumulative throw count would go backwards when
            // repeated, and the rate limit is not what this test is about.
            continue;
        }
        if shift(&mut r, 0) {
            events.push(r);
        } else {
            head.push(r);
        }
    }
    (head, events)
}

/// (name without labels, samples) of each push.
fn kinds(pushes: &[Push]) -> Vec<(String, usize)> {
    pushes.iter().map(|p| (p.name.split('{').next().unwrap().to_string(), p.samples)).collect()
}

fn long_run(name: &str) {
    let (head, events) = split(name);
    let last = events.len();
    assert!(last > 0, "{name}: no events to repeat");
    let mut live = RunPusher::new();
    let mut whole = RunPusher::keeping_everything();
    let head = clrprof_trace::encode_records(head.iter());
    assert_eq!(live.feed(&clrprof_trace::header()), None);
    assert_eq!(live.feed(&head), None);
    assert_eq!(whole.feed(&clrprof_trace::header()), None);
    assert_eq!(whole.feed(&head), None);
    let start = {
        let (records, _) = clrprof_trace::read_all(std::fs::File::open(trace(name)).unwrap()).unwrap();
        records.iter().find_map(|r| if let Record::ProcessStart(s) = r { Some(s.start_unix_ns) } else { None }).unwrap()
    };
    let mut first: Option<Vec<(String, usize)>> = None;
    let mut retained = Vec::new();
    for k in 0..WINDOWS {
        let rep: Vec<Record> = events
            .iter()
            .cloned()
            .map(|mut r| {
                shift(&mut r, k * PERIOD);
                r
            })
            .collect();
        for chunk in rep.chunks(500) {
            let bytes = clrprof_trace::encode_records(chunk.iter());
            assert_eq!(live.feed(&bytes), None);
            if k < COMPARED {
                assert_eq!(whole.feed(&bytes), None);
            }
        }
        retained.push(live.retained());
        // The test's clock: the window's end plus the lag.
        let now = start + (k + 1) * PERIOD + LAG;
        let pushes = live.due(now, LAG);
        assert_eq!(live.pushed_until(), (k + 1) * PERIOD);
        assert!(!pushes.is_empty(), "{name}: window {k} pushed nothing");
        for p in &pushes {
            assert_eq!((p.from_unix_ns, p.until_unix_ns), (start + k * PERIOD, start + (k + 1) * PERIOD));
        }
        if k < COMPARED {
            let reference = whole.due(now, LAG);
            assert_eq!(pushes.len(), reference.len(), "{name}: window {k}");
            for (a, b) in pushes.iter().zip(&reference) {
                assert_eq!(a.name, b.name);
                assert!(a.body == b.body, "{name}: window {k}: {} differs from the whole run's builder", a.name);
            }
        }
        // Every window holds one repetition: the same kinds, the same sample counts.
        match &first {
            None => first = Some(kinds(&pushes)),
            Some(f) => assert_eq!(&kinds(&pushes), f, "{name}: window {k}"),
        }
    }
    eprintln!(
        "{name}: {} events a repetition; retained before windows 0, 1, last: {} {} {}; after the last: {}; \
         keeping everything, after {COMPARED} windows: {}",
        last,
        retained[0],
        retained[1],
        retained[WINDOWS as usize - 1],
        live.retained(),
        whole.retained()
    );
    // The builder that keeps everything holds every repetition fed to it (the first one with the
    // definitions' log lines); the live one holds one repetition, the same number every window.
    assert_eq!(whole.retained(), retained[0] + (COMPARED - 1) * retained[1], "{name}: the whole run's builder");
    for (k, r) in retained.iter().enumerate().skip(1) {
        assert_eq!(*r, retained[1], "{name}: records retained before window {k}");
    }
    assert!(retained[1] <= retained[0], "{name}");
    assert!(live.retained() <= retained[1], "{name}: {} retained after the last window", live.retained());
    let end = live.finish();
    assert!(end.is_empty(), "{name}: nothing after the last window");
}

#[test]
fn two_hours_of_samples_keep_one_window() {
    long_run("sampled");
}

#[test]
fn two_hours_of_exceptions_allocations_and_gcs_keep_one_window() {
    long_run("exceptions");
    long_run("events");
}

#[test]
fn two_hours_of_lock_contention_keep_one_window() {
    long_run("contention");
}

#[test]
fn two_hours_of_instrumented_call_costs_keep_one_window() {
    long_run("instrumented");
}
