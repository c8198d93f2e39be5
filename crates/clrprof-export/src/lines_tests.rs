//! Exports of a profile built with lines: each format carries the frames' files and lines (pprof
//! locations with line numbers under one function per method, speedscope and Chrome file and
//! line, Firefox frame lines under one function per method), and names keep lines apart.

use clrprof_model::{Cost, FrameKey, FrameKind, Metric, Profile, SourceLine};
use clrprof_query::Threads;
use serde_json::Value;

use super::*;

/// Main (Program.cs:5) → Work at lines 10 (3 samples) and 12 (1 sample), with timed samples.
fn profile() -> Profile {
    let mut p = Profile::default();
    p.process.pid = 7;
    p.threads.push(clrprof_model::Thread { id: 1, os_tid: Some(7), ..Default::default() });
    let st = &mut p.costs.stacks;
    let mut frame = |id: u64, name: &str, line: u32, file: &str| {
        let f = st.intern_frame(FrameKey::Label(format!("{name}:{line}")));
        let fr = &mut st.frames[f.0 as usize];
        fr.key = FrameKey::Function(id);
        fr.kind = FrameKind::Managed;
        fr.name = name.into();
        fr.module = "App.dll".into();
        fr.line = Some(SourceLine { file: file.into(), line });
        f
    };
    let main = frame(100, "App.Main", 5, "/src/Program.cs");
    let w10 = frame(200, "App.Work", 10, "/src/Work.cs");
    let w12 = frame(200, "App.Work", 12, "/src/Work.cs");
    let mut ts = 0;
    for (path, n) in [(vec![main, w10], 3u64), (vec![main, w12], 1)] {
        let s = p.costs.stacks.intern_stack(&path).unwrap();
        p.costs.add(7, s, &Cost { cpu_samples: n, cpu_ns: n * 1_000_000, ..Default::default() });
        for _ in 0..n {
            ts += 1_000_000;
            p.samples.push(clrprof_model::samples::TimedSample {
                ts,
                os_tid: 7,
                stack: s,
                weight: clrprof_model::samples::SampleWeight::Cpu,
                count: 1,
                ns: 1_000_000,
                flow: 0,
            });
        }
    }
    p
}

fn export(p: &Profile, f: ExportFormat) -> Vec<u8> {
    let threads = Threads::all();
    let stacks = clrprof_query::weighted_stacks::stacks(p, Some(Metric::Cpu), &threads);
    let inp = ExportInput { profile: p, stacks, threads };
    let mut out = Vec::new();
    exporter(f).write(&inp, &mut out).unwrap();
    out
}

/// The fields of a protobuf message: (field, varint or bytes).
fn fields(mut b: &[u8]) -> Vec<(u64, Result<u64, Vec<u8>>)> {
    fn varint(b: &mut &[u8]) -> u64 {
        let mut v = 0;
        for shift in (0..).step_by(7) {
            let x = b[0];
            *b = &b[1..];
            v |= ((x & 0x7f) as u64) << shift;
            if x < 0x80 {
                break;
            }
        }
        v
    }
    let mut out = Vec::new();
    while !b.is_empty() {
        let key = varint(&mut b);
        match key & 7 {
            0 => out.push((key >> 3, Ok(varint(&mut b)))),
            2 => {
                let n = varint(&mut b) as usize;
                out.push((key >> 3, Err(b[..n].to_vec())));
                b = &b[n..];
            }
            w => panic!("wire type {w}"),
        }
    }
    out
}

#[test]
fn pprof_locations_carry_lines_under_one_function_per_method() {
    let raw = pprof::encode(&profile(), &Threads::all(), Metric::Cpu);
    let top = fields(&raw);
    let strings: Vec<String> =
        top.iter().filter(|(f, _)| *f == 6).map(|(_, v)| String::from_utf8(v.clone().unwrap_err()).unwrap()).collect();
    let sub = |n: u64| top.iter().filter(move |(f, _)| *f == n).map(|(_, v)| fields(v.as_ref().unwrap_err()));
    let one = |m: &[(u64, Result<u64, Vec<u8>>)], n: u64| {
        m.iter().find(|(f, _)| *f == n).map(|(_, v)| *v.as_ref().unwrap()).unwrap_or(0)
    };
    // Functions: id → (name, file).
    let funcs: Vec<(u64, String, String)> = sub(5)
        .map(|m| (one(&m, 1), strings[one(&m, 2) as usize].clone(), strings[one(&m, 4) as usize].clone()))
        .collect();
    assert_eq!(funcs.len(), 2, "{funcs:?}");
    let name_of = |id: u64| funcs.iter().find(|f| f.0 == id).map(|f| (f.1.clone(), f.2.clone())).unwrap();
    let mut lines: Vec<(String, String, u64)> = sub(4)
        .map(|loc| {
            let line = loc.iter().find(|(f, _)| *f == 4).map(|(_, v)| fields(v.as_ref().unwrap_err())).unwrap();
            let (name, file) = name_of(one(&line, 1));
            (name, file, one(&line, 2))
        })
        .collect();
    lines.sort();
    assert_eq!(
        lines,
        [
            ("App.Main".into(), "/src/Program.cs".into(), 5),
            ("App.Work".into(), "/src/Work.cs".into(), 10),
            ("App.Work".into(), "/src/Work.cs".into(), 12)
        ]
    );
}

#[test]
fn speedscope_chrome_and_firefox_carry_files_and_lines() {
    let p = profile();
    let ss: Value = serde_json::from_slice(&export(&p, ExportFormat::Speedscope)).unwrap();
    let frames = ss["shared"]["frames"].as_array().unwrap();
    let mut got: Vec<(String, String, u64)> = frames
        .iter()
        .map(|f| (f["name"].as_str().unwrap().into(), f["file"].as_str().unwrap().into(), f["line"].as_u64().unwrap()))
        .collect();
    got.sort();
    assert_eq!(got[2], ("App.Work (Work.cs:12)".into(), "/src/Work.cs".into(), 12));
    assert_eq!(got.len(), 3);

    let ch: Value = serde_json::from_slice(&export(&p, ExportFormat::Chrome)).unwrap();
    let slices: Vec<&Value> = ch["traceEvents"].as_array().unwrap().iter().filter(|e| e["ph"] == "X").collect();
    let w10 = slices.iter().find(|e| e["name"] == "App.Work (Work.cs:10)").expect("a slice of line 10");
    assert_eq!((w10["args"]["url"].as_str(), w10["args"]["lineNumber"].as_u64()), (Some("/src/Work.cs"), Some(10)));
    assert_eq!(w10["dur"].as_f64(), Some(3000.0), "three 1 ms samples on line 10 in a row");

    let ff: Value = serde_json::from_slice(&export(&p, ExportFormat::Firefox)).unwrap();
    let t = &ff["threads"][0];
    let strings = ff["shared"]["stringArray"].as_array().unwrap();
    let s = |v: &Value| strings[v.as_u64().unwrap() as usize].as_str().unwrap().to_string();
    let funcs = &t["funcTable"];
    assert_eq!(funcs["length"], 2, "one function per method, not per line");
    let ft = &t["frameTable"];
    let mut frames: Vec<(String, String, u64)> = (0..ft["length"].as_u64().unwrap() as usize)
        .map(|i| {
            let func = ft["func"][i].as_u64().unwrap() as usize;
            (s(&funcs["name"][func]), s(&funcs["fileName"][func]), ft["line"][i].as_u64().unwrap())
        })
        .collect();
    frames.sort();
    assert_eq!(frames[1], ("App.Work".into(), "/src/Work.cs".into(), 10));
    assert_eq!(frames.len(), 3);
}

#[test]
fn folded_stacks_keep_lines_apart() {
    let text = String::from_utf8(export(&profile(), ExportFormat::Collapsed)).unwrap();
    assert_eq!(
        text,
        "App.Main (Program.cs:5);App.Work (Work.cs:10) 3\nApp.Main (Program.cs:5);App.Work (Work.cs:12) 1\n"
    );
}

#[test]
fn otlp_locations_carry_lines_under_one_function_per_method() {
    use prost::Message;
    let raw = otlp::encode(&profile(), &Threads::all()).0;
    let r = otlp::proto::ExportProfilesServiceRequest::decode(raw.as_slice()).unwrap();
    let d = r.dictionary.unwrap();
    let s = |i: i32| d.string_table[i as usize].clone();
    // Two functions (and the zero entry), one per method, named with their source file.
    let funcs: Vec<(String, String)> =
        d.function_table.iter().skip(1).map(|f| (s(f.name_strindex), s(f.filename_strindex))).collect();
    assert_eq!(funcs, [("App.Work".into(), "/src/Work.cs".into()), ("App.Main".into(), "/src/Program.cs".into())]);
    let mut lines: Vec<(String, i64)> = d
        .location_table
        .iter()
        .skip(1)
        .map(|l| (s(d.function_table[l.line[0].function_index as usize].name_strindex), l.line[0].line))
        .collect();
    lines.sort();
    assert_eq!(lines, [("App.Main".into(), 5), ("App.Work".into(), 10), ("App.Work".into(), 12)]);
}
