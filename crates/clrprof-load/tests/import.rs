//! Importers read the fixtures of testdata/import (one small program, App.exe, in every format and
//! layout) into the canonical model with exact numbers, and format detection tells them apart.

use std::path::PathBuf;

use clrprof_load::import::{Format, ImportOptions};
use clrprof_load::source::{LoadError, Loader};
use clrprof_model::{Metric, NoSymbols, Profile, TimeRange};
use clrprof_query::costs::{call_tree, callers, hotspots, CostQuery};
use clrprof_query::diff::{diff, DiffQuery};
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
        assert_eq!(clrprof_query::select::totals(&p).calls, 76);
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
    // A caller/callee summary has no paths: they are estimated from the callers' shares. Self
    // values are exact; here, where every function has one path per caller, the estimate is the
    // real call tree.
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
                row(MAIN, app, 0, 10000 * SAMPLE, 0),
                row(WORK, app, 2000 * SAMPLE, 7000 * SAMPLE, 0),
            ],
            "{name}"
        );
        let c = callers(&p, &CostQuery::default(), Some(HASH)).unwrap().function.unwrap();
        let edges: Vec<(Option<String>, u64)> =
            c.callers.iter().map(|e| (e.name.clone(), e.cost.cpu_samples)).collect();
        assert_eq!(edges, [(Some(WORK.to_string()), 5000), (Some(PARSE.to_string()), 2000)], "{name}");
        let note = p.messages.iter().find(|m| m.contains("CallerCallee")).unwrap();
        assert!(note.contains("no call paths: they are estimated"), "{note}");
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
    }
    // Instrumented: numeric types, ',' decimals, UTF-16; and Visual Studio 2010's full 33-column
    // header (probe overheads, min/avg/max, source, address, `Root Function Name`, process). Hash's
    // 69.25 ms are split over its callers by their calls (40 and 20), the parts summing exactly.
    for name in
        ["vs2010_instrumentation_CallerCalleeSummary_utf16.csv", "vs2010_instrumentation_CallerCalleeSummary_full.csv"]
    {
        let (_, p) = load(name);
        assert_eq!(
            functions(&p, Metric::Time),
            [
                row(HASH, "Hashing.dll", 69_250_000, 69_250_000, 60),
                row(PARSE, "App.exe", 10_500_000, 10_500_000 + 23_083_333, 5),
                row(MAIN, "App.exe", 500_000, 100_500_000, 1),
                row(WORK, "App.exe", 20_250_000, 20_250_000 + 46_166_667, 10),
            ],
            "{name}"
        );
        let c = callers(&p, &CostQuery { metric: Some(Metric::Calls), ..Default::default() }, Some(HASH)).unwrap();
        let edges: Vec<(Option<String>, u64)> =
            c.function.unwrap().callers.iter().map(|e| (e.name.clone(), e.calls)).collect();
        assert_eq!(edges, [(Some(WORK.to_string()), 40), (Some(PARSE.to_string()), 20)], "{name}");
    }
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

#[test]
fn caller_callee_recursion_and_cycles_keep_self_values() {
    // F calls itself, G and H; G and H call each other.
    let csv = "Type,Function Name,Inclusive Samples,Exclusive Samples,Inclusive Samples %,Exclusive Samples %\n\
               Root,F,100,10,100.00,10.00\nCaller,F,50,5,50.00,5.00\nCallee,G,60,30,60.00,30.00\n\
               Root,G,60,30,60.00,30.00\nCaller,F,40,20,40.00,20.00\nCaller,H,20,10,20.00,10.00\n\
               Root,H,40,40,40.00,40.00\nCaller,G,20,20,20.00,20.00\nCaller,F,20,20,20.00,20.00\n";
    let (l, _) = Loader::read(TraceSource::Bytes(csv.as_bytes().to_vec()), &ImportOptions::default()).unwrap();
    let p = l.profile(TimeRange::ALL, &mut NoSymbols);
    let rows = functions(&p, Metric::Cpu);
    let selfs: Vec<(&str, u64)> = rows.iter().map(|r| (r.0.as_str(), r.2 / SAMPLE)).collect();
    assert_eq!(selfs, [("F", 10), ("G", 30), ("H", 40)]);
    // Everything hangs under F, the one function whose callers are all on its own paths.
    let v = callers(&p, &CostQuery::default(), None).unwrap();
    let roots: Vec<&str> = v.entry_points.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(roots, ["F"]);
    assert_eq!(v.entry_total, 80 * SAMPLE);
}

/// A CallTree report laid out as Visual Studio's instrumentation profiler writes it (the header,
/// UTF-8 BOM, a level-0 process row with an empty module, quoted thousands, averages rounded to
/// 0.01 ms, full signatures with commas, explicit interface implementations, an unresolved token),
/// in English-locale UTF-8 and as a French-locale UTF-16 file (non-breaking-space thousands,
/// decimal commas). Calls, names and times are exact: a function called 2,893,824 times at an
/// average of "0.00" ms takes its 4.21% of the run's 200,000 ms, not 0 ms.
#[test]
fn visual_studio_instrumentation_call_tree_reads_exactly() {
    for name in
        ["vs2015_instrumentation_CallTreeSummary_bom.csv", "vs2019_instrumentation_CallTreeSummary_fr_utf16.csv"]
    {
        let (f, p) = load(name);
        assert_eq!(f, Format::VsPerfCsv, "{name}");
        const HIT: &str = "Render.Shapes.IShape.Hit(class Render.Ray&,bool&)";
        const SPHERE: &str = "Render.Shapes.Sphere.Render.Shapes.IShape.Hit(class Render.Ray&,bool&)";
        const BOX: &str = "Render.Shapes.Box.Render.Shapes.IShape.Hit(class Render.Ray&,bool&)";
        const DOT: &str = "Render.Vector3.Dot(valuetype Render.Vector3,valuetype Render.Vector3)";
        const LAMBDA: &str = "Render.Tracer.<Trace>b__4_0(int32)";
        const MAIN: &str = "Render.App.Main(string[])";
        let mut expected = vec![
            row("0x0A00005F", "Render.exe", 10_000 * MS, 10_000 * MS, 35_330),
            row(MAIN, "Render.exe", 2_000 * MS, 20_000 * MS, 1),
            row(BOX, "Render.exe", 31_580 * MS, 31_580 * MS, 964_608),
            row(HIT, "Render.exe", 8_420 * MS, 120_000 * MS, 2_893_824),
            row(SPHERE, "Render.exe", 60_000 * MS, 80_000 * MS, 1_929_216),
            row(LAMBDA, "Render.exe", 40_000 * MS, 180_000 * MS, 500),
            row("Render.Exe", "", 0, 200_000 * MS, 0),
            row(
                "Render.Gl.TexImage2D(valuetype Render.Gl.Target,int32,!!0[])",
                "Render.dll",
                10_000 * MS,
                10_000 * MS,
                1,
            ),
            row("Render.Scene..ctor(int32,int32)", "Render.exe", 8_000 * MS, 8_000 * MS, 1),
            row(DOT, "Render.dll", 20_000 * MS, 20_000 * MS, 3_575_792),
            row(
                "System.Collections.Generic.List`1.get_Item(int32)",
                "mscorlib.dll",
                10_000 * MS,
                10_000 * MS,
                1_205_760,
            ),
        ];
        expected[6].0 = "Render.exe".into();
        expected.sort();
        // Times are read from rounded averages and shares: within a microsecond of the figures.
        let got: Vec<_> = functions(&p, Metric::Time)
            .into_iter()
            .map(|(n, m, s, i, c)| (n, m, (s + 500) / 1000 * 1000, (i + 500) / 1000 * 1000, c))
            .collect();
        assert_eq!(got, expected, "{name}");
        assert_eq!(functions(&p, Metric::Calls).iter().map(|r| r.4).sum::<u64>(), 10_605_033, "{name}");
        // Not clrprof's hooks: the weight says whose figures they are.
        let note = clrprof_query::select::weight_note(&p, Metric::Time);
        assert_eq!(note, "weight: time — as the imported report gives them", "{name}");
        // Functions carry the trace's naming: `Ns.Type.Method`, its class and its parameter list.
        let f = |n: &str| p.functions.iter().find(|f| f.name == n).unwrap_or_else(|| panic!("{name}: no {n}"));
        let hit = f("Render.Shapes.IShape.Hit");
        assert_eq!(
            (hit.class_name.as_str(), hit.signature.as_str()),
            ("Render.Shapes.IShape", "(class Render.Ray&,bool&)")
        );
        let sphere = f("Render.Shapes.Sphere.Render.Shapes.IShape.Hit");
        assert_eq!(sphere.class_name, "Render.Shapes.Sphere");
        assert_eq!(f("Render.Scene..ctor").class_name, "Render.Scene");
        assert_eq!(f("Render.exe").class_name, "");
        assert_eq!(f("0x0A00005F").class_name, "");
        assert!(paths(&p, Metric::Time)
            .iter()
            .any(|(path, v)| path == &format!("Render.exe > {LAMBDA} > {HIT} > {SPHERE} > {DOT}")
                && (*v + 500) / 1000 * 1000 == 20_000 * MS));
    }
}

/// The JSON report of an imported instrumentation report carries its calls and times (functions,
/// call tree, hot spots), as a clrprof instrumented trace's does.
#[test]
fn imported_instrumentation_reports_have_calls_in_json() {
    let (_, p) = load("vs2015_instrumentation_CallTreeSummary_bom.csv");
    let doc = clrprof_query::document::document(&p, &clrprof_query::select::Threads::all(), None);
    let v = serde_json::to_value(&doc).unwrap();
    let hit = v["functions"].as_array().unwrap().iter().find(|f| f["name"] == "Render.Shapes.IShape.Hit").unwrap();
    assert_eq!(hit["calls"], 2_893_824);
    assert_eq!(hit["class"], "Render.Shapes.IShape");
    assert_eq!(hit["signature"], "(class Render.Ray&,bool&)");
    let tree = v["calltree"].as_array().expect("a call tree");
    let calls: u64 = tree.iter().map(|n| n["calls"].as_u64().unwrap()).sum();
    assert_eq!(calls, 10_605_033);
}
