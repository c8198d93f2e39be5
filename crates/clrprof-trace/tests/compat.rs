//! Old traces stay readable forever (docs/trace-format.md, "Compatibility"): every trace under
//! `testdata/traces/v1` was recorded by clrprof at format version 1 and must be read completely
//! by this and every later version — no error, no truncation, no record of an unknown type.

use std::collections::BTreeMap;
use std::path::PathBuf;

use clrprof_trace::{code_kind, Decoder, Record};

fn traces_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/traces/v1")
}

/// Every record of a checked-in trace, read to the end.
fn read(name: &str) -> Vec<Record> {
    let path = traces_dir().join(format!("{name}.clrprof"));
    let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut d = Decoder::new(std::io::BufReader::new(file)).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(d.version(), 1, "{name}");
    let mut out = Vec::new();
    loop {
        match d.next_record() {
            Ok(Some(r)) => out.push(r),
            Ok(None) => break,
            Err(e) => panic!("{name}: error after {} records: {e}", out.len()),
        }
    }
    assert_eq!(d.truncation(), None, "{name}");
    assert!(d.skipped().is_empty(), "{name}: unknown tags {:?}", d.skipped());
    out
}

fn counts(records: &[Record]) -> BTreeMap<&'static str, usize> {
    let mut m = BTreeMap::new();
    for r in records {
        *m.entry(r.name()).or_insert(0) += 1;
    }
    m
}

#[test]
fn every_v1_trace_is_read_completely() {
    let mut names: Vec<String> = std::fs::read_dir(traces_dir())
        .expect("testdata/traces/v1")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "clrprof"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(names.len() >= 6, "the v1 traces are missing: {names:?}");
    for name in &names {
        let recs = read(name);
        println!("{name}: {} records {:?}", recs.len(), counts(&recs));
        assert!(!recs.iter().any(|r| matches!(r, Record::Unknown { .. })), "{name}");
    }
}

/// A trace's name, the end of its command line, its record count and counts of some record types.
type Case = (&'static str, &'static str, usize, &'static [(&'static str, usize)]);

/// Exact facts of each trace: its command, its record count, and counts of the records that
/// carry what it was recorded for.
#[test]
fn v1_traces_hold_what_they_were_recorded_with() {
    let cases: [Case; 6] = [
        (
            "contention",
            "Events.dll contention 20",
            1934,
            &[("ContentionStarted", 20), ("ContentionEnded", 20), ("NativeMapping", 19)],
        ),
        (
            "counted",
            "Calls.dll threads",
            3805,
            &[("InstrumentationInfo", 1), ("FunctionHooked", 1867), ("CallTreeNodes", 5)],
        ),
        (
            "events",
            "Events.dll mix",
            2774,
            &[("GcStarted", 6), ("GcFinished", 6), ("GcInfo", 6), ("AllocationSample", 1006)],
        ),
        ("exceptions", "Events.dll exceptions 40", 2688, &[("ExceptionThrown", 40), ("ExceptionPhase", 880)]),
        (
            "instrumented",
            "Calls.dll counted",
            3674,
            &[("InstrumentationInfo", 1), ("FlowEvents", 1), ("FunctionHooked", 1817)],
        ),
        (
            "sampled",
            "Sampling.dll threads 3 300",
            3221,
            &[("ClassLoaded", 1110), ("CpuSample", 68), ("WallSample", 53)],
        ),
    ];
    for (name, command, total, want) in cases {
        let recs = read(name);
        assert_eq!(recs.len(), total, "{name}");
        match &recs[0] {
            Record::ProcessStart(p) => {
                assert!(p.command_line.ends_with(command), "{name}: {}", p.command_line);
                assert_eq!(
                    (p.runtime_version.as_str(), p.runtime_major, p.info_version),
                    ("10.0.12", 10, 15),
                    "{name}"
                );
                assert_eq!(p.agent_version, "0.1.0", "{name}");
                assert!(p.config.contains(&format!("output=/tmp/gold/{name}.clrprof\n")), "{name}");
            }
            r => panic!("{name} starts with {r:?}"),
        }
        match recs.last().unwrap() {
            Record::ProcessExit(e) => assert_eq!((e.exit_code, e.signal), (Some(0), None), "{name}"),
            r => panic!("{name} ends with {r:?}"),
        }
        let c = counts(&recs);
        assert_eq!(c.get("AgentStop"), Some(&1), "{name}");
        assert!(c.get("FunctionCompiled").copied().unwrap_or(0) > 800, "{name}: {c:?}");
        for (record, n) in want {
            assert_eq!(c.get(record), Some(n), "{name}: {record}");
        }
        // Written before build-ids were recorded: the field reads as its default (empty).
        for r in &recs {
            if let Record::NativeMapping(m) = r {
                assert!(m.path.starts_with('/') && m.build_id.is_empty(), "{name}: {m:?}");
            }
        }
        // Every compiled function has a name; JIT-compiled ones have code.
        for r in &recs {
            if let Record::FunctionCompiled(f) = r {
                assert!(!f.name.is_empty(), "{name}: {f:?}");
                if f.kind == code_kind::JIT {
                    assert!(f.code_start != 0 && f.code_size != 0, "{name}: {f:?}");
                }
            }
        }
    }
}
