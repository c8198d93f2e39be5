//! Importers read the fixtures of testdata/import (one small program, App.exe, in every format and
//! layout) into the canonical model with exact numbers, and format detection tells them apart.

use std::path::PathBuf;

use clrprof_model::{Metric, NoSymbols, Profile, TimeRange};
use clrprof_query::costs::{call_tree, callers, hotspots, CostQuery};
use clrprof_query::diff::{diff, DiffQuery};
use clrprof_query::import::{Format, ImportOptions};
use clrprof_query::source::{LoadError, Loader};
use clrprof_trace::TraceSource;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/import").join(name)
}

fn load(name: &str) -> (Format, Profile) {
    let (l, _) = Loader::read(TraceSource::File(fixture(name)), &ImportOptions::default()).unwrap();
    (l.format(), l.profile(TimeRange::ALL, &mut NoSymbols))
}

const MAIN: &str = "App.Program.Main(string[])";
const WORK: &str = "App.Worker.Work(int32)";
const PARSE: &str = "App.Parser.Parse(string)";
const HASH: &str = "App.Hasher.Hash(uint8[])";

/// (name, module, self, inclusive, calls) per function for a metric, by name.
fn functions(p: &Profile, m: Metric) -> Vec<(String, String, u64, u64, u64)> {
    let v = hotspots(p, &CostQuery { metric: Some(m), ..Default::default() }, None);
    let mut rows: Vec<_> = v.groups[0]
        .rows
        .iter()
        .map(|r| (r.name.clone(), r.module.clone(), m.of(&r.self_cost), m.of(&r.inclusive), r.self_cost.calls))
        .collect();
    rows.sort();
    rows
}

fn row(name: &str, module: &str, s: u64, i: u64, calls: u64) -> (String, String, u64, u64, u64) {
    (name.to_string(), module.to_string(), s, i, calls)
}

const MS: u64 = 1_000_000;
const SAMPLE: u64 = 10 * MS;

/// Root-first paths of the call tree with their inclusive value.
fn paths(p: &Profile, m: Metric) -> Vec<(String, u64)> {
    let v = call_tree(p, &CostQuery { metric: Some(m), ..Default::default() }, None);
    let nodes = &v.groups[0].rows;
    let mut out = Vec::new();
    for n in nodes {
        let mut names = vec![n.name.clone()];
        let mut cur = n.parent;
        while let Some(c) = cur {
            names.push(nodes[c].name.clone());
            cur = nodes[c].parent;
        }
        names.reverse();
        out.push((names.join(" > "), m.of(&n.inclusive)));
    }
    out.sort();
    out
}

#[test]
fn sampled_call_trees_in_both_layouts_and_locales() {
    for name in ["vs2010_sampling_CallTreeSummary.csv", "vs2012_sampling_CallTreeSummary_de.csv"] {
        let (f, p) = load(name);
        assert_eq!(f, Format::VsPerfCsv, "{name}");
        assert_eq!(
            functions(&p, Metric::Cpu),
            [
                row(HASH, "Hashing.dll", 7000 * SAMPLE, 7000 * SAMPLE, 0),
                row(PARSE, "App.exe", 1000 * SAMPLE, 3000 * SAMPLE, 0),
                row(MAIN, "App.exe", 0, 10000 * SAMPLE, 0),
                row(WORK, "App.exe", 2000 * SAMPLE, 7000 * SAMPLE, 0),
            ],
            "{name}"
        );
        let samples = hotspots(&p, &CostQuery::default(), None).groups[0].total;
        assert_eq!(samples, 10000 * SAMPLE);
        assert_eq!(p.sampling.cpu_samples, 10000);
        assert_eq!(
            paths(&p, Metric::Cpu),
            [
                (MAIN.to_string(), 10000 * SAMPLE),
                (format!("{MAIN} > {PARSE}"), 3000 * SAMPLE),
                (format!("{MAIN} > {PARSE} > {HASH}"), 2000 * SAMPLE),
                (format!("{MAIN} > {WORK}"), 7000 * SAMPLE),
                (format!("{MAIN} > {WORK} > {HASH}"), 5000 * SAMPLE),
            ],
            "{name}"
        );
        let note = p.messages.iter().find(|m| m.starts_with("imported vsperfreport CallTree")).unwrap();
        let comma = if name.ends_with("_de.csv") { ',' } else { '.' };
        assert!(note.contains(&format!("decimal separator '{comma}'")), "{note}");
    }
}

#[test]
fn instrumented_call_trees_with_times_or_averages() {
    for name in ["vs2010_instrumentation_CallTreeSummary.csv", "vs2012_instrumentation_CallTreeSummary.csv"] {
        let (_, p) = load(name);
        assert!(p.instrumentation.is_some());
        assert_eq!(
            functions(&p, Metric::Time),
            [
                row(HASH, "Hashing.dll", 69_250_000, 69_250_000, 60),
                row(PARSE, "App.exe", 10_500_000, 30_000_000, 5),
                row(MAIN, "App.exe", 500_000, 100_500_000, 1),
                row(WORK, "App.exe", 20_250_000, 70_000_000, 10),
            ],
            "{name}"
        );
        // The natural weight of an instrumented import is exact time.
        assert_eq!(hotspots(&p, &CostQuery::default(), None).metric, Metric::Time);
        let c = callers(&p, &CostQuery { metric: Some(Metric::Calls), ..Default::default() }, Some(HASH)).unwrap();
        let f = c.function.unwrap();
        let edges: Vec<(Option<String>, u64)> = f.callers.iter().map(|e| (e.name.clone(), e.calls)).collect();
        assert_eq!(edges, [(Some(WORK.to_string()), 40), (Some(PARSE.to_string()), 20)], "{name}");
    }
}

#[test]
fn caller_callee_summaries_keep_exact_self_values() {
    // A caller/callee summary has no paths: self values are exact; each function's inclusive
    // value covers its own self value and its direct callees' (documented).
    for (name, modules) in [("seed_CallerCalleeSummary.csv", false), ("vs2012_sampling_CallerCalleeSummary.csv", true)]
    {
        let (f, p) = load(name);
        assert_eq!(f, Format::VsPerfCsv, "{name}");
        let (app, hashing) = if modules { ("App.exe", "Hashing.dll") } else { ("", "") };
        assert_eq!(
            functions(&p, Metric::Cpu),
            [
                row(HASH, hashing, 7000 * SAMPLE, 7000 * SAMPLE, 0),
                row(PARSE, app, 1000 * SAMPLE, 3000 * SAMPLE, 0),
                row(MAIN, app, 0, 3000 * SAMPLE, 0),
                row(WORK, app, 2000 * SAMPLE, 7000 * SAMPLE, 0),
            ],
            "{name}"
        );
        let c = callers(&p, &CostQuery::default(), Some(HASH)).unwrap().function.unwrap();
        let edges: Vec<(Option<String>, u64)> =
            c.callers.iter().map(|e| (e.name.clone(), e.cost.cpu_samples)).collect();
        assert_eq!(edges, [(Some(WORK.to_string()), 5000), (Some(PARSE.to_string()), 2000)], "{name}");
        let note = p.messages.iter().find(|m| m.contains("CallerCallee")).unwrap();
        assert!(note.contains("no call paths"), "{note}");
    }
    // Instrumented, numeric types, ',' decimals, UTF-16: Hash's 69.25 ms are split over its
    // callers by their calls (40 and 20), the parts summing exactly.
    let (_, p) = load("vs2010_instrumentation_CallerCalleeSummary_utf16.csv");
    assert_eq!(
        functions(&p, Metric::Time),
        [
            row(HASH, "Hashing.dll", 69_250_000, 69_250_000, 60),
            row(PARSE, "App.exe", 10_500_000, 10_500_000 + 23_083_333, 5),
            row(MAIN, "App.exe", 500_000, 31_250_000, 1),
            row(WORK, "App.exe", 20_250_000, 20_250_000 + 46_166_667, 10),
        ]
    );
    let c = callers(&p, &CostQuery { metric: Some(Metric::Calls), ..Default::default() }, Some(HASH)).unwrap();
    let edges: Vec<(Option<String>, u64)> =
        c.function.unwrap().callers.iter().map(|e| (e.name.clone(), e.calls)).collect();
    assert_eq!(edges, [(Some(WORK.to_string()), 40), (Some(PARSE.to_string()), 20)]);
}

#[test]
fn folded_stacks_and_csv_of_one_program_do_not_differ() {
    let (f, folded) = load("program.folded");
    assert_eq!(f, Format::Collapsed);
    let (_, tree) = load("vs2010_sampling_CallTreeSummary.csv");
    let v = diff(&folded, &tree, &DiffQuery::default());
    assert_eq!((v.base_sum, v.new_sum), (100_000_000_000, 100_000_000_000));
    assert_eq!(v.count, 4);
    assert!(v.functions.iter().all(|r| r.delta == 0 && r.delta_total == 0 && r.only_in.is_none()), "{v:?}");
}

#[test]
fn unknown_formats_name_what_was_seen() {
    let err = |bytes: &[u8]| match Loader::open(TraceSource::Bytes(bytes.to_vec())) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("accepted {bytes:?}"),
    };
    assert_eq!(
        err(b"<html><body>hello</body></html>\n"),
        "not a clrprof trace, collapsed stacks or vsperfreport CSV: first line starts with \"<html><body>hello</body></html>\""
    );
    assert_eq!(
        err(&[0x50, 0x4b, 3, 4, 0, 0]),
        "not a clrprof trace, collapsed stacks or vsperfreport CSV: binary data starting with bytes 50 4b 03 04 00 00"
    );
    assert!(err(b"Level,Function Name,Exclusive Samples\n1,a,x\n").contains("record 2: 'x' is not a sample count"));
    assert!(err(b"Type,Function Name,Foo\n").contains("no 'Exclusive Samples'"));
    // A trace is still a trace, and an imported file is not one.
    assert!(matches!(Loader::load(TraceSource::File(fixture("program.folded"))), Err(LoadError::Import(_))));
}
