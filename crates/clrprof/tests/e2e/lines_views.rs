//! Source lines in the views, exports and viewer, on `apps/Lines` (its `// LINE:NAME` markers name
//! the lines; no line number is written here): `report --view lines` gives the two loops' lines
//! with their 3:1 split, `--view source` prints the method's text with the costs on those lines,
//! the source embedded in a PDB or its Source Link URL stands in when the file is gone, `go tool
//! pprof -lines` reads the same lines from the pprof export, speedscope, Chrome and Firefox
//! exports carry them, and the viewer's source panel shows them (a browser test).

use crate::common::*;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use serde_json::Value;

/// Millions of iterations per share: loop A runs 3 shares, loop B one (about 1.5 s of CPU for
/// both; at the 250 Hz the kernel's tick allows, some 380 samples in them).
const SHARES: &str = "300";

/// The largest distance allowed between loop A's measured share of the two loops and 3/4: about
/// three standard deviations of a binomial share of 380 samples (0.022 each).
const SPLIT_TOLERANCE: f64 = 0.07;

/// `// LINE:NAME` markers of a source file: name → line (1-based).
fn markers(file: &Path) -> HashMap<String, u32> {
    let text = std::fs::read_to_string(file).unwrap();
    text.lines()
        .enumerate()
        .filter_map(|(i, l)| l.split("// LINE:").nth(1).map(|m| (m.trim().to_string(), i as u32 + 1)))
        .collect()
}

/// The Lines app profiled once for the module (sampled at 250 Hz).
struct Run {
    trace: PathBuf,
    dir: PathBuf,
    program: PathBuf,
    lines: HashMap<String, u32>,
}

fn run() -> &'static Run {
    static RUN: OnceLock<Run> = OnceLock::new();
    RUN.get_or_init(|| {
        let _machine = machine::shared();
        let dir = scratch("lines-views");
        let trace = dir.join("lines.clrprof");
        let out = record("Lines", &[SHARES], &trace, &["--rate", "250"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert!(text(&out.stdout).contains(&format!("loop B iterations: {SHARES}000000")), "{}", text(&out.stdout));
        let program = repo_root().join("apps/Lines/Program.cs");
        Run { trace, dir, lines: markers(&program), program }
    })
}

fn ok(out: std::process::Output) -> String {
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    text(&out.stdout)
}

fn json(out: std::process::Output) -> Value {
    serde_json::from_str(&ok(out)).unwrap()
}

/// Rows of `--view lines --format json` as (function, file, line) → (self, total).
fn line_rows(trace: &Path, extra: &[&str]) -> HashMap<(String, String, u64), (u64, u64)> {
    let mut args = vec!["--view", "lines", "--format", "json", "--weight", "cpu"];
    args.extend_from_slice(extra);
    let v = json(report(trace, &args));
    v["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let key = (
                r["function"].as_str().unwrap().to_string(),
                r["file"].as_str().unwrap().to_string(),
                r["line"].as_u64().unwrap(),
            );
            (key, (r["self"].as_u64().unwrap(), r["total"].as_u64().unwrap()))
        })
        .collect()
}

#[test]
fn hot_lines_split_the_two_loops_three_to_one() {
    let r = run();
    let rows = line_rows(&r.trace, &["--function", "Lines.Loops.TwoLoops"]);
    let file = r.program.to_string_lossy().to_string();
    let at = |m: &str| rows.get(&("Lines.Loops.TwoLoops".to_string(), file.clone(), r.lines[m] as u64)).copied();
    let (a, b) = (at("A").expect("loop A's line").0, at("B").expect("loop B's line").0);
    let share = a as f64 / (a + b) as f64;
    assert!(
        (share - 0.75).abs() <= SPLIT_TOLERANCE,
        "loop A's share of the two loops: {share:.3} (A {a} ns, B {b} ns)"
    );
    // The two loops are nearly all of the method's own time.
    let method_self: u64 = rows.values().map(|v| v.0).sum();
    assert!((a + b) as f64 >= 0.9 * method_self as f64, "A+B {} of the method's {method_self}", a + b);
    // Main's call site carries the whole method in its total (a caller's line is its call site).
    let all = line_rows(&r.trace, &[]);
    let call =
        all.get(&("Lines.Program.Main".to_string(), file.clone(), r.lines["CALL"] as u64)).expect("Main's call site");
    let two_loops_total = rows.values().map(|v| v.1).max().unwrap();
    assert!(call.1 >= a + b && call.1 >= two_loops_total, "call site total {} < {}", call.1, a + b);
    // The text view has the same rows.
    let t = ok(report(&r.trace, &["--view", "lines", "--weight", "cpu", "--function", "TwoLoops"]));
    let row =
        t.lines().find(|l| l.contains("Program.cs") && l.split_whitespace().nth(7) == Some(&r.lines["A"].to_string()));
    assert!(row.is_some_and(|l| l.ends_with("Lines.Loops.TwoLoops")), "{t}");
}

#[test]
fn the_source_view_prints_the_method_with_costs_on_its_lines() {
    let r = run();
    let v = json(report(
        &r.trace,
        &["--view", "source", "--function", "Lines.Loops.TwoLoops", "--format", "json", "--weight", "cpu"],
    ));
    let s = &v["source"];
    assert_eq!(s["origin"], "disk", "{s}");
    assert_eq!(s["file"].as_str(), Some(r.program.to_str().unwrap()));
    let lines = s["lines"].as_array().unwrap();
    let line = |n: u32| lines.iter().find(|l| l["line"] == n).unwrap_or_else(|| panic!("line {n} in {s}"));
    // Each marked line has its text and the same self figure as the lines view.
    let rows = line_rows(&r.trace, &["--function", "Lines.Loops.TwoLoops"]);
    let file = r.program.to_string_lossy().to_string();
    for m in ["A", "B"] {
        let l = line(r.lines[m]);
        assert!(l["text"].as_str().unwrap().ends_with(&format!("// LINE:{m}")), "{l}");
        let want = rows[&("Lines.Loops.TwoLoops".to_string(), file.clone(), r.lines[m] as u64)];
        assert_eq!((l["self"].as_u64().unwrap(), l["total"].as_u64().unwrap()), want, "line {m}");
    }
    // The text: the costed columns on the marked line, blank on the method's signature.
    let t = ok(report(&r.trace, &["--view", "source", "--function", "TwoLoops", "--weight", "cpu"]));
    let row_a = t.lines().find(|l| l.ends_with("// LINE:A")).expect("loop A's line printed");
    let cells: Vec<&str> = row_a.split_whitespace().collect();
    assert_eq!(cells[4], r.lines["A"].to_string(), "{row_a}");
    let signature = "public static ulong TwoLoops(long n)";
    let sig_line =
        std::fs::read_to_string(&r.program).unwrap().lines().position(|l| l.contains(signature)).unwrap() + 1;
    let sig = t.lines().find(|l| l.contains(signature)).expect("the signature");
    assert_eq!(sig.split_whitespace().next(), Some(sig_line.to_string().as_str()), "no cost on the signature: {sig}");
    // The JSON document is per function: --by-line sends the user to the lines view.
    let e = report(&r.trace, &["--by-line", "--format", "json"]);
    assert!(!e.status.success() && text(&e.stderr).contains("--view lines --format json"), "{}", text(&e.stderr));
    // Without --function: a clear error.
    let e = report(&r.trace, &["--view", "source"]);
    assert!(
        !e.status.success() && text(&e.stderr).contains("--view source needs --function NAME"),
        "{}",
        text(&e.stderr)
    );
}

/// A copy of apps/Lines built with a Source Link map, its sources removed after the build, and
/// profiled: the source view falls back to the PDB's embedded source or the Source Link URL.
#[test]
fn missing_sources_show_the_embedded_source_or_the_source_link() {
    let _machine = machine::shared();
    let dir = scratch("lines-moved");
    let src = dir.join("Lines");
    copy_sources(&repo_root().join("apps/Lines"), &src);
    // The apps' shared build settings (target framework, ...).
    for f in ["Directory.Build.props", "Directory.Build.targets"] {
        std::fs::copy(repo_root().join("apps").join(f), dir.join(f)).unwrap();
    }
    let map = dir.join("sourcelink.json");
    let prefix = format!("{}/", src.display());
    std::fs::write(&map, format!(r#"{{"documents": {{"{prefix}*": "https://example.invalid/lines/*"}}}}"#)).unwrap();
    // The app's own project (not the library built without a PDB) gets the map.
    let project = src.join("Lines.csproj");
    let xml = std::fs::read_to_string(&project).unwrap().replacen(
        "<ItemGroup>",
        &format!("<PropertyGroup><SourceLink>{}</SourceLink></PropertyGroup>\n  <ItemGroup>", map.display()),
        1,
    );
    std::fs::write(&project, xml).unwrap();
    let out = Command::new("dotnet")
        .args(["build", "-nologo", "-v", "q", "-c", "Release"])
        .arg(&src)
        .env("DOTNET_CLI_TELEMETRY_OPTOUT", "1")
        .env("DOTNET_NOLOGO", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
    let lines = markers(&src.join("Program.cs"));
    let embedded = markers(&src.join("EmbeddedLib/Embedded.cs"));
    // The sources leave the machine.
    for f in ["Program.cs", "EmbeddedLib/Embedded.cs"] {
        std::fs::rename(src.join(f), dir.join(f.replace('/', "-") + ".moved")).unwrap();
    }
    let trace = dir.join("moved.clrprof");
    let out = Command::new(clrprof_exe())
        .arg("record")
        .arg("-o")
        .arg(&trace)
        .args(["--rate", "250", "--agent"])
        .arg(agent_path())
        .args(["--", "dotnet"])
        .arg(src.join("bin/Release/net10.0/Lines.dll"))
        .arg("60")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));

    // Lines.dll: its PDB beside it, no embedded source: the Source Link URL and the costs alone.
    let v = json(report(&trace, &["--view", "source", "--function", "Lines.Loops.TwoLoops", "--format", "json"]));
    let s = &v["source"];
    assert_eq!(s["source_link"], "https://example.invalid/lines/Program.cs", "{s}");
    assert!(s["origin"].is_null(), "{s}");
    let costed: Vec<&Value> = s["lines"].as_array().unwrap().iter().filter(|l| l["self"].as_u64() > Some(0)).collect();
    assert!(costed.iter().all(|l| l["text"].is_null()), "{s}");
    assert!(costed.iter().any(|l| l["line"] == lines["A"]), "loop A's line has its cost: {s}");
    let t = ok(report(&trace, &["--view", "source", "--function", "Lines.Loops.TwoLoops"]));
    assert!(t.contains("not on this machine; Source Link: https://example.invalid/lines/Program.cs"), "{t}");

    // EmbeddedLib.dll: the PDB embedded in the DLL, with its sources.
    let v = json(report(&trace, &["--view", "source", "--function", "EmbeddedLib.Embedded.Spin", "--format", "json"]));
    let s = &v["source"];
    assert_eq!(s["origin"], "embedded", "{s}");
    let l = s["lines"].as_array().unwrap().iter().find(|l| l["line"] == embedded["EMBEDDED"]).expect("the loop's line");
    assert!(l["text"].as_str().unwrap().ends_with("// LINE:EMBEDDED") && l["self"].as_u64() > Some(0), "{l}");
    let t = ok(report(&trace, &["--view", "source", "--function", "EmbeddedLib.Embedded.Spin"]));
    assert!(t.contains("(source embedded in the PDB)") && t.contains("// LINE:EMBEDDED"), "{t}");
}

fn export_lines(r: &Run, format: &str, ext: &str) -> PathBuf {
    let out = r.dir.join(format!("lines.{ext}"));
    let o = Command::new(clrprof_exe())
        .arg("export")
        .arg(&r.trace)
        .args(["-f", format, "--by-line", "--weight", "cpu", "-o"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    out
}

#[test]
fn go_tool_pprof_lists_the_same_lines() {
    let r = run();
    let pb = export_lines(r, "pprof", "pb.gz");
    let out = Command::new("go")
        .args(["tool", "pprof", "-lines", "-top", "-nodecount=100", "-sample_index=cpu", "-unit=ns"])
        .arg(&pb)
        .env("HOME", std::env::temp_dir())
        .output()
        .expect("`go` is needed to check pprof exports: run scripts/bootstrap (it installs golang-go)");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let top = text(&out.stdout);
    let rows = line_rows(&r.trace, &["--function", "Lines.Loops.TwoLoops"]);
    let file = r.program.to_string_lossy().to_string();
    for m in ["A", "B"] {
        let line = r.lines[m];
        let want = rows[&("Lines.Loops.TwoLoops".to_string(), file.clone(), line as u64)].0;
        let row = top
            .lines()
            .find(|l| l.ends_with(&format!("Lines.Loops.TwoLoops {file}:{line}")))
            .unwrap_or_else(|| panic!("no row for line {m} ({line}) in:\n{top}"));
        let flat = row.split_whitespace().next().unwrap();
        assert_eq!(flat, format!("{want}ns"), "line {m}: {row}");
    }
}

#[test]
fn speedscope_chrome_and_firefox_exports_carry_the_lines() {
    let r = run();
    let file = r.program.to_string_lossy().to_string();
    let (a, b) = (r.lines["A"] as u64, r.lines["B"] as u64);
    let read = |p: PathBuf| -> Value { serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap() };

    let ss = read(export_lines(r, "speedscope", "speedscope.json"));
    let frames = ss["shared"]["frames"].as_array().unwrap();
    for l in [a, b] {
        let f = frames.iter().find(|f| f["file"] == file.as_str() && f["line"] == l);
        assert!(
            f.is_some_and(|f| f["name"] == format!("Lines.Loops.TwoLoops (Program.cs:{l})")),
            "speedscope line {l}"
        );
    }

    let ch = read(export_lines(r, "chrome", "trace.json"));
    let slices: Vec<&Value> = ch["traceEvents"].as_array().unwrap().iter().filter(|e| e["ph"] == "X").collect();
    for l in [a, b] {
        assert!(
            slices.iter().any(|e| e["args"]["url"] == file.as_str() && e["args"]["lineNumber"] == l),
            "chrome: a slice at line {l}"
        );
    }

    let ff = read(export_lines(r, "firefox", "firefox.json"));
    let strings = ff["shared"]["stringArray"].as_array().unwrap();
    let mut seen = Vec::new();
    for t in ff["threads"].as_array().unwrap() {
        let (ft, funcs) = (&t["frameTable"], &t["funcTable"]);
        for i in 0..ft["length"].as_u64().unwrap() as usize {
            let func = ft["func"][i].as_u64().unwrap() as usize;
            let name = strings[funcs["name"][func].as_u64().unwrap() as usize].as_str().unwrap();
            let fname = funcs["fileName"][func].as_u64().map(|s| strings[s as usize].as_str().unwrap());
            if name == "Lines.Loops.TwoLoops" && fname == Some(file.as_str()) {
                seen.push(ft["line"][i].as_u64().unwrap());
            }
        }
    }
    assert!(seen.contains(&a) && seen.contains(&b), "firefox frame lines of TwoLoops: {seen:?}");
}

/// The viewer's source panel in a browser (crates/clrprof-view/e2e/source.mjs): select TwoLoops,
/// open the Source tab, find loop A's and B's lines hot with the costs the API gives. Set
/// CLRPROF_SCREENSHOTS=DIR to keep its screenshot.
#[test]
fn the_viewer_shows_the_source_panel() {
    let r = run();
    let _machine = machine::shared();
    let (line_a, line_b) = (r.lines["A"].to_string(), r.lines["B"].to_string());
    run_browser_script(
        "source.mjs",
        "source: all checks passed",
        &[("TRACE", r.trace.as_os_str()), ("LINE_A", line_a.as_ref()), ("LINE_B", line_b.as_ref())],
    );
}
