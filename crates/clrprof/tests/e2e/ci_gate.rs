//! End to end: the CI regression gate of docs/ci.md. Two builds of apps/Diff — the base, and a
//! head built with `-p:Regressed=true` whose `Changing.Run` calls `Changing.Unit` twice per step —
//! recorded and gated with the `clrprof record` and `clrprof diff --fail-if` command lines of the
//! page's GitHub Actions job (read from the page, so the documented job is the tested one); a
//! second run of the base build is gated against the first.

use crate::common::*;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The `clrprof …` command lines of docs/ci.md's YAML job, as the words after `clrprof` (single quotes and the double
/// quotes around `$RUNNER_TEMP` paths removed, `$RUNNER_TEMP` replaced by `temp`).
fn documented_commands(temp: &Path) -> Vec<Vec<String>> {
    let doc = std::fs::read_to_string(repo_root().join("docs/ci.md")).expect("docs/ci.md");
    let yaml = doc.split("```yaml\n").nth(1).and_then(|s| s.split("```").next()).expect("a yaml block in docs/ci.md");
    yaml.lines()
        .map(str::trim)
        .filter(|l| l.starts_with("clrprof record ") || l.starts_with("clrprof diff "))
        .map(|l| words(&l.replace("$RUNNER_TEMP", &temp.display().to_string()))[1..].to_vec())
        .collect()
}

/// Splits a shell line into words: whitespace outside quotes; single and double quotes removed.
fn words(line: &str) -> Vec<String> {
    let (mut out, mut cur, mut quote, mut any) = (Vec::new(), String::new(), None, false);
    for c in line.chars() {
        match (quote, c) {
            (None, '\'' | '"') => (quote, any) = (Some(c), true),
            (Some(q), c) if c == q => quote = None,
            (None, c) if c.is_whitespace() => {
                if any {
                    out.push(std::mem::take(&mut cur));
                }
                any = false;
            }
            (_, c) => {
                cur.push(c);
                any = true;
            }
        }
    }
    if any {
        out.push(cur);
    }
    out
}

/// Builds a copy of apps/Diff into `temp/out/<name>` (as the job's `dotnet build -o` does).
fn build(temp: &Path, name: &str, regressed: bool) -> PathBuf {
    let src = temp.join("src").join(name);
    copy_sources(&repo_root().join("apps/Diff"), &src.join("Diff"));
    for f in ["Directory.Build.props", "Directory.Build.targets"] {
        std::fs::copy(repo_root().join("apps").join(f), src.join(f)).unwrap();
    }
    let out_dir = temp.join("out").join(name);
    let mut c = Command::new("dotnet");
    c.args(["build", "-nologo", "-v", "q", "-c", "Release", "-o"]).arg(&out_dir).arg(src.join("Diff"));
    if regressed {
        c.arg("-p:Regressed=true");
    }
    let out = c.env("DOTNET_CLI_TELEMETRY_OPTOUT", "1").env("DOTNET_NOLOGO", "1").output().expect("dotnet build");
    assert!(out.status.success(), "dotnet build {name} failed: {}{}", text(&out.stdout), text(&out.stderr));
    out_dir
}

/// Runs `clrprof` with `args` (the agent of this build added to `record`) in `cwd`.
fn clrprof(cwd: &Path, args: &[String]) -> Output {
    let mut c = Command::new(clrprof_exe());
    c.current_dir(cwd).stdin(Stdio::null());
    if args[0] == "record" {
        c.arg("record").arg("--agent").arg(agent_path()).args(&args[1..]);
    } else {
        c.args(args);
    }
    c.output().expect("run clrprof")
}

fn lines_starting<'a>(s: &'a str, prefix: &str) -> Vec<&'a str> {
    s.lines().filter(|l| l.starts_with(prefix)).collect()
}

/// `+95.6%` in a breach line: the change in percent.
fn change_percent(line: &str) -> f64 {
    let open = line.rfind(" (").unwrap();
    line[open + 2..].split('%').next().unwrap().parse().unwrap_or_else(|_| panic!("no change in {line}"))
}

/// `z = 4.2 ≥ 3.2` in a breach line.
fn z_and_needed(line: &str) -> (f64, f64) {
    let z = line.split("z = ").nth(1).unwrap_or_else(|| panic!("no z in {line}"));
    let mut w = z.split(' ');
    let z: f64 = w.next().unwrap().parse().unwrap();
    assert_eq!(w.next(), Some("≥"), "{line}");
    (z, w.next().unwrap().parse().unwrap())
}

#[test]
fn the_documented_gate_fails_on_a_regressed_build_and_passes_on_the_same_build() {
    let _machine = machine::shared();
    let temp = scratch("ci-gate");
    let cmds = documented_commands(&temp);
    assert_eq!(cmds.len(), 3, "docs/ci.md's job has two record lines and one diff line: {cmds:?}");
    let (rec_base, rec_head, gate) = (&cmds[0], &cmds[1], &cmds[2]);
    assert_eq!(gate[..3], ["diff", "base.clrprof", "head.clrprof"], "{gate:?}");
    build(&temp, "base", false);
    build(&temp, "head", true);
    let work = temp.join("work");
    std::fs::create_dir_all(&work).unwrap();
    for cmd in [rec_base, rec_head] {
        let out = clrprof(&work, cmd);
        assert!(out.status.success(), "clrprof {cmd:?}: {}{}", text(&out.stdout), text(&out.stderr));
    }
    // A second run of the base build: the same-build pair.
    let again: Vec<String> =
        rec_base.iter().map(|w| if w == "base.clrprof" { "again.clrprof".into() } else { w.clone() }).collect();
    assert_ne!(&again, rec_base, "the base record line names base.clrprof");
    let out = clrprof(&work, &again);
    assert!(out.status.success(), "{}", text(&out.stderr));

    // Base against head: exactly the three rules breach, each on its row.
    let out = clrprof(&work, gate);
    let (err, md) = (text(&out.stderr), std::fs::read_to_string(work.join("perf.md")).expect("perf.md written"));
    println!("{err}\n{md}");
    assert_eq!(out.status.code(), Some(3), "a breach exits with 3: {err}");
    let breaches = lines_starting(&err, "BREACH ");
    assert_eq!(breaches.len(), 3, "{err}");
    assert_eq!(
        breaches[0],
        "BREACH calls:Diff.Changing.Unit>+0: Diff.Changing.Unit (Diff.dll): 300 calls → 600 calls, +300 calls (+100.0%); exact"
    );
    let cpu = breaches[1];
    assert!(cpu.starts_with("BREACH function:Diff.*:cpu>+25%: Diff.Changing.Unit (Diff.dll): "), "{cpu}");
    // Twice the work: +100%, within the sampling's and the machine's noise.
    let grew = change_percent(cpu);
    assert!((65.0..=135.0).contains(&grew), "Changing.Unit grew by {grew}%: {cpu}");
    let (z, need) = z_and_needed(cpu);
    assert!(z >= need && need >= 3.0, "{cpu}");
    let total = breaches[2];
    assert!(total.starts_with("BREACH total:cpu>+20%: total: "), "{total}");
    assert!(z_and_needed(total).0 >= 3.0, "{total}");
    // Steady.Unit did the same work: at most noise, never a breach.
    assert!(!err.contains("BREACH function:Diff.*:cpu>+25%: Diff.Steady.Unit"), "{err}");
    assert_eq!(lines_starting(&err, "clrprof diff: "), ["clrprof diff: FAILED: 3 breaches"], "{err}");
    // The markdown: the verdict, the breaches, the top regression with its samples, the viewer.
    assert!(
        md.starts_with("## clrprof diff: FAILED, 3 breaches\n\nBase `base.clrprof` → new `head.clrprof`, weight "),
        "{md}"
    );
    assert!(md.contains("| `calls:Diff.Changing.Unit&gt;+0` | Diff.Changing.Unit (Diff.dll) | 300 calls | 600 calls | +300 calls | +100.0% | exact |\n"), "{md}");
    assert!(md.contains("| `function:Diff.*:cpu&gt;+25%` | Diff.Changing.Unit (Diff.dll) | "), "{md}");
    assert!(md.contains("### Top regressions (cpu, self)\n"), "{md}");
    let top = md.lines().skip_while(|l| !l.starts_with("### Top regressions")).nth(4).unwrap();
    assert!(top.starts_with("| [Diff.Changing.Unit](http://127.0.0.1:8080/?token=ci#view=diff&w=cpu&q=Diff.Changing.Unit) | Diff.dll | "), "{md}");
    assert!(top.ends_with(" | yes |"), "{top}");
    assert!(
        md.contains("clrprof view head.clrprof --baseline base.clrprof --port 8080 --token ci --no-browser\n"),
        "{md}"
    );

    // The same build twice: no breach at the documented thresholds.
    let same: Vec<String> =
        gate.iter().map(|w| if w == "head.clrprof" { "again.clrprof".into() } else { w.clone() }).collect();
    let out = clrprof(&work, &same);
    let err = text(&out.stderr);
    println!("{err}");
    assert_eq!(out.status.code(), Some(0), "the same build breached: {err}");
    assert!(lines_starting(&err, "BREACH").is_empty(), "{err}");
    assert_eq!(lines_starting(&err, "pass ").len(), 3, "{err}");
    assert_eq!(lines_starting(&err, "pass   calls:")[0], "pass   calls:Diff.Changing.Unit>+0: 1 tested", "{err}");
    let md = std::fs::read_to_string(work.join("perf.md")).unwrap();
    assert!(md.starts_with("## clrprof diff: passed (3 rules)\n"), "{md}");

    // A rule on a weight the traces lack is an error (2), not a pass.
    let lack: Vec<String> = ["diff", "base.clrprof", "again.clrprof", "--fail-if", "total:alloc-count>+0"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let out = clrprof(&work, &lack);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).starts_with("clrprof: error: --fail-if 'total:alloc-count>+0': base.clrprof"),
        "{}",
        text(&out.stderr)
    );
}

/// `phase 1 sessions=50 tags=50 …` → the value of `key`.
fn field(line: &str, key: &str) -> u64 {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
}

#[test]
fn type_rules_gate_two_heap_snapshots_exactly() {
    use std::io::{BufRead, BufReader, Write};
    let _machine = machine::shared();
    let dir = scratch("ci-gate-heap");
    // apps/HeapLeak, two phases of 50 sessions (phase 2 also drops the oldest tenth); a snapshot after each.
    let mut c = Command::new("dotnet");
    c.arg(app_dll("HeapLeak")).args(["2", "50", "64"]).stdin(Stdio::piped()).stdout(Stdio::piped());
    for k in ["CORECLR_ENABLE_PROFILING", "CORECLR_PROFILER", "CORECLR_PROFILER_PATH"] {
        c.env_remove(k);
    }
    let mut child = KillOnDrop(c.spawn().expect("start apps/HeapLeak"));
    let mut stdin = child.0.stdin.take().unwrap();
    let mut out = BufReader::new(child.0.stdout.take().unwrap());
    let pid = child.0.id().to_string();
    let mut phases = Vec::new();
    for k in 1..=2 {
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert!(line.starts_with(&format!("phase {k} ")), "unexpected {line:?}");
        let snap = dir.join(format!("s{k}.clrprof"));
        let o = Command::new(clrprof_exe())
            .args(["heap", &pid, "-o"])
            .arg(&snap)
            .arg("--agent")
            .arg(agent_path())
            .output()
            .unwrap();
        assert!(o.status.success(), "clrprof heap: {}", text(&o.stderr));
        writeln!(stdin).unwrap();
        phases.push((snap, line.trim().to_string()));
    }
    drop(stdin);
    assert!(child.0.wait().unwrap().success());
    let (s1, s2) = (field(&phases[0].1, "sessions"), field(&phases[1].1, "sessions"));
    let (t1, t2) = (field(&phases[0].1, "tags"), field(&phases[1].1, "tags"));
    assert!(s2 > s1 && t2 > t1 && (t2 - t1) * 100 < t1 * 100, "the app's counts: {phases:?}");
    // Sessions grew (a breach, exact); tags grew by less than 100% (a pass).
    let o = Command::new(clrprof_exe())
        .arg("diff")
        .arg(&phases[0].0)
        .arg(&phases[1].0)
        .args(["--fail-if", "type:HeapLeak.Session:count>+0,type:HeapLeak.Tag:count>+100%"])
        .output()
        .unwrap();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    let pct = (s2 - s1) as f64 * 100.0 / s1 as f64;
    assert_eq!(
        lines_starting(&err, "BREACH "),
        [format!(
            "BREACH type:HeapLeak.Session:count>+0: HeapLeak.Session: {s1} objects → {s2} objects, +{} objects ({pct:+.1}%); exact",
            s2 - s1
        )],
        "{err}"
    );
    assert_eq!(lines_starting(&err, "pass "), ["pass   type:HeapLeak.Tag:count>+100%: 1 tested"], "{err}");
    // The heap diff's text is on standard output as before; a profile rule on snapshots is an error.
    assert!(text(&o.stdout).contains("HeapLeak.Session"), "{}", text(&o.stdout));
    let o = Command::new(clrprof_exe())
        .arg("diff")
        .arg(&phases[0].0)
        .arg(&phases[1].0)
        .args(["--snapshots", "1,1", "--fail-if", "type:NoSuch.*:count>+0"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        text(&o.stderr).lines().next().unwrap(),
        "clrprof: error: --fail-if 'type:NoSuch.*:count>+0': 'NoSuch.*' matches no type in either snapshot"
    );
}
