//! Live profiles and time ranges on the real traces checked into testdata/traces/v1: a profile
//! taken while records are still arriving equals a one-shot load of the same records, and time
//! windows split the run's costs exactly.

use std::path::PathBuf;

use clrprof_load::source::Loader;
use clrprof_model::{NoSymbols, Profile, ProfileBuilder, TimeRange};
use clrprof_query::document::document;
use clrprof_query::Threads;
use clrprof_trace::{Record, StreamDecoder, TraceSource};

fn traces() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/traces/v1");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    v.sort();
    assert!(v.len() >= 6, "traces missing in {}", dir.display());
    v
}

fn json(p: &Profile) -> String {
    serde_json::to_string(&serde_json::to_value(document(p, &Threads::all(), None)).unwrap()).unwrap()
}

fn records(path: &PathBuf) -> Vec<Record> {
    let mut d = StreamDecoder::new();
    let mut out = Vec::new();
    d.push(&std::fs::read(path).unwrap(), &mut out).unwrap();
    assert_eq!(d.finish().unwrap(), None);
    out
}

fn one_shot(records: &[Record]) -> String {
    let mut b = ProfileBuilder::new();
    for r in records {
        b.add(r);
    }
    json(&b.profile(TimeRange::ALL, &mut NoSymbols))
}

#[test]
fn profiles_taken_while_records_arrive_equal_one_shot_loads() {
    for path in traces() {
        let all = records(&path);
        let mut live = ProfileBuilder::new();
        let checkpoints = [all.len() / 7, all.len() / 3, all.len() / 2, all.len() * 4 / 5];
        for (i, r) in all.iter().enumerate() {
            if checkpoints.contains(&i) {
                let now = json(&live.profile(TimeRange::ALL, &mut NoSymbols));
                assert_eq!(now, one_shot(&all[..i]), "{} after {i} records", path.display());
            }
            live.add(r);
        }
        assert_eq!(json(&live.profile(TimeRange::ALL, &mut NoSymbols)), one_shot(&all), "{}", path.display());
    }
}

#[test]
fn bytes_arriving_in_pieces_build_the_same_profile() {
    for path in traces() {
        let bytes = std::fs::read(&path).unwrap();
        let whole = {
            let (b, d) = Loader::load(TraceSource::File(path.clone())).unwrap();
            assert_eq!(d.truncation, None);
            json(&b.profile(TimeRange::ALL, &mut NoSymbols))
        };
        // A file still being written: appended in uneven pieces, polled in between.
        let growing = std::env::temp_dir().join(format!(
            "clrprof-live-{}-{}",
            std::process::id(),
            path.file_name().unwrap().to_string_lossy()
        ));
        std::fs::write(&growing, b"").unwrap();
        let mut l = Loader::open(TraceSource::Growing(growing.clone())).unwrap();
        let mut at = 0;
        let mut step = 1000;
        while at < bytes.len() {
            let end = (at + step).min(bytes.len());
            use std::io::Write;
            std::fs::OpenOptions::new().append(true).open(&growing).unwrap().write_all(&bytes[at..end]).unwrap();
            at = end;
            step = step * 3 + 17;
            l.update().unwrap();
            let _ = l.profile(TimeRange::ALL, &mut NoSymbols);
        }
        l.update().unwrap();
        assert_eq!(json(&l.profile(TimeRange::ALL, &mut NoSymbols)), whole, "{}", path.display());
        let _ = std::fs::remove_file(growing);
    }
}

fn load(name: &str) -> ProfileBuilder {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../../testdata/traces/v1/{name}.clrprof"));
    Loader::load(TraceSource::File(path)).unwrap().0
}

#[test]
fn time_windows_split_sampled_costs_exactly() {
    let b = load("sampled");
    let all = b.profile(TimeRange::ALL, &mut NoSymbols);
    let total = clrprof_query::select::totals(&all);
    assert!(total.cpu_samples > 50, "{total:?}");
    let mid = all.process.duration_ns / 2;
    let first = b.profile(TimeRange::new(0, mid), &mut NoSymbols);
    let second = b.profile(TimeRange::new(mid, u64::MAX), &mut NoSymbols);
    let (a, z) = (clrprof_query::select::totals(&first), clrprof_query::select::totals(&second));
    assert!(a.cpu_samples > 0 && z.cpu_samples > 0, "both halves have samples: {a:?} {z:?}");
    assert_eq!(a.cpu_samples + z.cpu_samples, total.cpu_samples);
    assert_eq!(a.cpu_ns + z.cpu_ns, total.cpu_ns);
    assert_eq!(a.wall_ns + z.wall_ns, total.wall_ns);
    assert!(first.samples.iter().all(|s| s.ts < mid) && second.samples.iter().all(|s| s.ts >= mid));
    assert_eq!(first.samples.len() + second.samples.len(), all.samples.len());
    assert_eq!(first.sampling.cpu_samples, a.cpu_samples, "the sampling summary covers the window");
    // The tables stay whole: names of everything loaded before or after the window.
    assert_eq!(first.functions.len(), all.functions.len());
    // The timeline's buckets add up to the window's samples.
    let tl = clrprof_query::timeline::timeline(&first, &Threads::all(), Some(10_000_000));
    let cpu: u64 = tl.threads.iter().flat_map(|t| t.cpu_samples.iter()).sum();
    assert_eq!(cpu, a.cpu_samples);
    assert_eq!(tl.buckets as u64, mid.div_ceil(10_000_000));
}

#[test]
fn time_windows_split_instrumented_calls_by_flush() {
    let b = load("counted");
    let all = b.profile(TimeRange::ALL, &mut NoSymbols);
    let total = clrprof_query::select::totals(&all);
    let mut sum = 0;
    let step = all.process.duration_ns / 5 + 1;
    for k in 0..5 {
        let w = b.profile(TimeRange::new(k * step, (k + 1) * step), &mut NoSymbols);
        sum += clrprof_query::select::totals(&w).calls;
    }
    assert_eq!(sum, total.calls);
    assert!(total.calls >= 10_000, "4 threads × 2,500 calls of Calls.Shared.Work: {}", total.calls);
}

#[test]
fn typed_answers_serialize_with_their_figures() {
    use clrprof_query::costs::{callers, hotspots, CostQuery};
    let p = load("sampled").profile(TimeRange::ALL, &mut NoSymbols);
    let q = CostQuery { top: Some(1), ..Default::default() };
    let h = serde_json::to_value(hotspots(&p, &q, None)).unwrap();
    assert_eq!(h["metric"], "cpu");
    let top = &h["groups"][0]["rows"][0];
    assert_eq!(top["name"], "Sampling.Many.Spin");
    assert_eq!(top["self_cost"]["cpu_samples"], 56, "as the golden report says");
    assert_eq!(
        h["groups"][0]["count"], 60,
        "as the golden report says (the runtime's unnamed frames are [runtime], [JIT] and [stub])"
    );
    let c = serde_json::to_value(callers(&p, &q, Some("Sampling.Many.Spin")).unwrap()).unwrap();
    assert_eq!(c["function"]["names"][0], "Sampling.Many.Spin");
    assert_eq!(c["function"]["inclusive"]["cpu_samples"], 59);
    assert_eq!(c["entry_points"].as_array().unwrap().len(), 1);
    let ev = serde_json::to_value(&load("events").profile(TimeRange::ALL, &mut NoSymbols).events).unwrap();
    assert_eq!(ev["gcs"].as_array().unwrap().len(), 6);
    assert_eq!(ev["gcs"][0]["reason"], "small-alloc");
}
