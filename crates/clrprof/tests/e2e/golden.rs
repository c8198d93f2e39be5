//! Golden reports and exports of real traces checked into `testdata/traces/` (recorded by earlier
//! versions of clrprof, kept readable by every later one). Runs without .NET: every case in
//! `testdata/golden/cases` must print exactly its file. `CLRPROF_BLESS=1` rewrites the files.

use crate::common::*;

use std::path::Path;
use std::process::Command;

fn cases() -> Vec<(String, Vec<String>)> {
    let root = repo_root();
    let text = std::fs::read_to_string(root.join("testdata/golden/cases")).expect("testdata/golden/cases");
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let mut words = l.split_whitespace().map(|w| match w.strip_prefix('@') {
                Some(name) => root.join(format!("testdata/traces/v1/{name}.clrprof")).display().to_string(),
                None => w.to_string(),
            });
            let out = words.next().unwrap();
            (out, words.collect())
        })
        .collect()
}

fn run(args: &[String]) -> Vec<u8> {
    let out = Command::new(clrprof_exe()).args(args).arg("--no-native-symbols").output().expect("run clrprof");
    assert!(out.status.success(), "clrprof {} failed: {}", args.join(" "), text(&out.stderr));
    out.stdout
}

/// The first line where two outputs differ, for a readable failure.
fn first_difference(want: &[u8], got: &[u8]) -> String {
    let (w, g) = (text(want), text(got));
    for (i, (a, b)) in w.lines().zip(g.lines()).enumerate() {
        if a != b {
            return format!("line {}:\n  want: {a}\n  got:  {b}", i + 1);
        }
    }
    format!("lengths differ: want {} lines, got {}", w.lines().count(), g.lines().count())
}

#[test]
fn reports_and_exports_match_their_golden_files() {
    let bless = std::env::var_os("CLRPROF_BLESS").is_some();
    let dir = repo_root().join("testdata/golden");
    let mut failures = Vec::new();
    let cases = cases();
    assert!(cases.len() >= 60, "the case list was cut short");
    for (file, args) in &cases {
        let got = run(args);
        let path = dir.join(file);
        if bless {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &got).unwrap();
            continue;
        }
        let want = std::fs::read(&path).unwrap_or_else(|_| panic!("{} is missing: run with CLRPROF_BLESS=1", file));
        if want != got {
            failures.push(format!("{file} ({}): {}", args.join(" "), first_difference(&want, &got)));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} golden outputs differ:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn golden_outputs_are_deterministic() {
    // Two runs of the same report give the same bytes (no hash-map order leaks into output).
    let (_, args) = cases().into_iter().find(|(f, _)| f == "sampled/report.json").unwrap();
    assert_eq!(run(&args), run(&args));
    assert!(Path::new(&args[1]).is_file());
}
