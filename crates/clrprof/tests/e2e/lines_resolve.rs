//! End to end: sampled frames resolved to source lines (apps/Lines): the IL-to-native maps the
//! agent records for every code version (OSR code included), the app's portable PDB, an embedded
//! PDB, a library without PDB, an inlined callee, and a caller's frame at its call site. The lines
//! are looked up from the `// LINE:NAME` markers of the app's sources, not written down here.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::common::*;

use clrprof_load::{read, Input, ReadOptions};
use clrprof_model::{Profile, StackId};

/// The line of the `// LINE:name` marker in `file` (1-based).
fn marker(file: &Path, name: &str) -> u32 {
    let text = std::fs::read_to_string(file).unwrap();
    let tag = format!("// LINE:{name}");
    let i = text.lines().position(|l| l.trim_end().ends_with(&tag)).unwrap_or_else(|| panic!("{tag} in {file:?}"));
    i as u32 + 1
}

/// The trace read with lines (PDBs found beside the assemblies or embedded).
fn profile_with_lines(trace: &Path, symbol_dirs: Vec<PathBuf>) -> Profile {
    let input = Input::resolve(trace, None).unwrap();
    let o = ReadOptions {
        range: Default::default(),
        native_symbols: false,
        debug_dirs: symbol_dirs,
        lines: true,
        call_site_lines: false,
        import: Default::default(),
        store: None,
        physical_stacks: false,
        show_idle: false,
        merge_threads: false,
    };
    read(trace, input, &o).unwrap().0
}

/// Per function name and (file name, line): self and inclusive CPU ns (recursion counted once),
/// and the frames' lines with no line (`None`) under `(name, None)`.
type LineCosts = HashMap<(String, Option<(String, u32)>), (u64, u64)>;

fn line_costs(p: &Profile) -> LineCosts {
    let merged = p.costs.merged(None);
    let mut out: LineCosts = HashMap::new();
    for (i, c) in merged.iter().enumerate() {
        if c.cpu_ns == 0 {
            continue;
        }
        let frames = p.costs.stacks.frames_of(StackId(i as u32));
        let key = |f: &clrprof_model::FrameId| {
            let fr = &p.costs.stacks.frames[f.0 as usize];
            let line = fr.line.as_ref().map(|l| (l.file.rsplit('/').next().unwrap_or(&l.file).to_string(), l.line));
            (fr.name.clone(), line)
        };
        if let Some(leaf) = frames.last() {
            out.entry(key(leaf)).or_default().0 += c.cpu_ns;
        }
        let mut seen = Vec::new();
        for f in &frames {
            let k = key(f);
            if !seen.contains(&k) {
                out.entry(k.clone()).or_default().1 += c.cpu_ns;
                seen.push(k);
            }
        }
    }
    out
}

fn self_ns(c: &LineCosts, function: &str, file: &str, line: u32) -> u64 {
    c.get(&(function.to_string(), Some((file.to_string(), line)))).map_or(0, |v| v.0)
}

fn function_self_ns(c: &LineCosts, function: &str) -> u64 {
    c.iter().filter(|(k, _)| k.0 == function).map(|(_, v)| v.0).sum()
}

fn printed(stdout: &str, what: &str) -> u64 {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{what} iterations: ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("`{what} iterations:` not printed in {stdout:?}"))
}

/// CPU-time timers fire every 4 ms of a thread's CPU time at 250 Hz: the loops (about 0.8 s) get
/// some 200 samples, taken at regular points of their CPU time, so the split is off by a sample or
/// two at the loops' boundaries, not by a random draw's spread.
const RATE: [&str; 2] = ["--rate", "250"];
/// One sample's CPU time at that rate.
const SAMPLE_NS: u64 = 4_000_000;

/// Records apps/Lines (on .NET 10 through `dotnet`, or `runtime`'s self-contained copy).
fn record_lines(name: &str, runtime: Option<&str>) -> (PathBuf, String) {
    let dir = scratch(name);
    let trace = dir.join("lines.clrprof");
    let out = match runtime {
        None => record("Lines", &[], &trace, &RATE),
        Some(r) => record_on(r, "Lines", &[], &trace, &RATE),
    };
    assert!(out.status.success(), "record failed: {}{}", text(&out.stdout), text(&out.stderr));
    (trace, text(&out.stdout))
}

#[test]
fn loops_inlined_code_and_libraries_resolve_to_their_lines() {
    let _machine = machine::alone();
    let (trace, stdout) = record_lines("lines-resolve", None);
    check_lines(&trace, &stdout);
}

#[test]
fn lines_resolve_on_net8() {
    let _machine = machine::alone();
    let (trace, stdout) = record_lines("lines-net8", Some("net8.0"));
    check_lines(&trace, &stdout);
}

#[test]
fn lines_resolve_on_net9() {
    let _machine = machine::alone();
    let (trace, stdout) = record_lines("lines-net9", Some("net9.0"));
    check_lines(&trace, &stdout);
}

/// The checks of a Lines run: the two loops' lines at 3:1, the inlined callee on its call-site line,
/// a caller at its call line, the embedded PDB, the library without PDB.
fn check_lines(trace: &Path, stdout: &str) {
    let src = repo_root().join("apps/Lines");
    let program = src.join("Program.cs");
    let (a, b) = (marker(&program, "A"), marker(&program, "B"));
    let p = profile_with_lines(trace, Vec::new());
    let c = line_costs(&p);

    // The two loops: 3:1 by iteration count (printed by the app), the same work per iteration.
    let (ia, ib) = (printed(stdout, "loop A"), printed(stdout, "loop B"));
    assert_eq!(ia, 3 * ib);
    let f = "Lines.Loops.TwoLoops";
    let (sa, sb) = (self_ns(&c, f, "Program.cs", a), self_ns(&c, f, "Program.cs", b));
    let total = function_self_ns(&c, f);
    assert!(sa + sb >= 100_000_000, "enough CPU on the two loops: {sa} + {sb} ns");
    // Nearly all of the method's own time is on the two loop lines (the rest: its other lines).
    assert!((sa + sb) as f64 >= 0.97 * total as f64, "loops {sa}+{sb} of {total} ns in {f}: {c:?}");
    let share = sa as f64 / (sa + sb) as f64;
    eprintln!("lines: loop A {sa} ns, loop B {sb} ns, share {share:.3}; method self {total} ns");
    // Sampled, so a band: 0.688 was seen once on a loaded machine (the rest 0.72–0.78); a line
    // mix-up would read 0.5 or 1.0.
    assert!((0.66..=0.84).contains(&share), "line {a} has {share:.3} of the two loops' CPU, expected 0.75 ± 0.09");

    // The inlined callee: no frame of its own; its code is the caller's call-site line.
    let inl = marker(&program, "INLINED");
    let g = "Lines.Loops.Inlined";
    // Before the loop goes to OSR code (some 50,000 iterations of tier-0 code, which inlines nothing),
    // Step runs as a call of its own: a sample may land there on a busy machine, never more than two.
    let step = function_self_ns(&c, "Lines.Loops.Step");
    assert!(step <= 2 * SAMPLE_NS, "Step is inlined: {step} ns in a frame of its own, more than two samples");
    let si = self_ns(&c, g, "Program.cs", inl);
    assert!(si as f64 >= 0.97 * function_self_ns(&c, g) as f64, "{g}'s time on line {inl}: {c:?}");

    // The caller's frame is resolved at its call instruction: Main's line calling TwoLoops.
    let call = marker(&program, "CALL");
    let main_total =
        c.get(&("Lines.Program.Main".to_string(), Some(("Program.cs".to_string(), call)))).map_or(0, |v| v.1);
    assert!(main_total as f64 >= 0.97 * (sa + sb) as f64, "Main's call line {call} holds TwoLoops' time: {c:?}");

    // The embedded PDB resolves; the library without PDB stays per function, and says so once.
    let emb = marker(&src.join("EmbeddedLib/Embedded.cs"), "EMBEDDED");
    let e = "EmbeddedLib.Embedded.Spin";
    let se = self_ns(&c, e, "Embedded.cs", emb);
    assert!(se > 0 && se as f64 >= 0.97 * function_self_ns(&c, e) as f64, "{e} on line {emb}: {c:?}");
    let n = "NoPdbLib.NoPdb.Spin";
    assert!(c.get(&(n.to_string(), None)).is_some_and(|v| v.0 > 0), "{n} per function: {c:?}");
    assert_eq!(function_self_ns(&c, n), c[&(n.to_string(), None)].0, "{n} has no lines");
    let said: Vec<&String> = p.messages.iter().filter(|m| m.contains("NoPdbLib.dll")).collect();
    assert_eq!(said.len(), 1, "one message names the module without PDB: {:?}", p.messages);
    assert!(said[0].contains("no PDB"), "{said:?}");
}

#[test]
fn the_two_loops_resolve_as_osr_code() {
    let _machine = machine::alone();
    let (trace, _) = record_lines("lines-osr", None);
    let program = repo_root().join("apps/Lines/Program.cs");
    let (a, b) = (marker(&program, "A"), marker(&program, "B"));
    let (records, _) = clrprof_trace::read_all(std::fs::File::open(&trace).unwrap()).unwrap();
    let p = profile_with_lines(&trace, Vec::new());
    let f = p.functions.iter().find(|f| f.name == "Lines.Loops.TwoLoops").expect("TwoLoops compiled");
    // TwoLoops is called once: a second code version can only be its OSR version (tier 1 comes after
    // 30 calls). Its versions' code, in the order the sampler found them: tier 0 first.
    let mut versions: Vec<u64> = Vec::new();
    for r in &records {
        if let clrprof_trace::Record::CodeRange(c) = r {
            if c.id == f.id && !versions.contains(&c.start) {
                versions.push(c.start);
            }
        }
    }
    assert_eq!(versions.len(), 2, "TwoLoops' tier-0 and OSR versions: {versions:x?}");
    // The agent recorded the IL-to-native map of the OSR version its samples hit.
    let osr = records
        .iter()
        .find_map(|r| match r {
            clrprof_trace::Record::IlMap(m) if m.id == f.id && m.code_start == versions[1] => Some(m),
            _ => None,
        })
        .expect("the OSR version's IL map");
    let mut il = clrprof_model::lines::IlMaps::default();
    il.add(osr.id, osr.code_start, &osr.entries);
    // The CPU samples whose leaf is in the OSR code, resolved by hand: IL offset from the recorded
    // map, line from the PDB.
    let pdb = clrprof_load::ppdb::find_pdb(&repo_root().join("apps/Lines/bin/Release/net10.0/Lines.dll"), &[])
        .unwrap_or_else(|_| panic!("Lines.pdb"));
    let mut stacks = HashMap::new();
    let (mut on, mut all) = (HashMap::<u32, u64>::new(), 0u64);
    for r in &records {
        match r {
            clrprof_trace::Record::SampleStack(s) => {
                stacks.insert(s.id, s.clone());
            }
            clrprof_trace::Record::CpuSample(c) => {
                let s = &stacks[&c.stack];
                if s.functions.first() != Some(&f.id) {
                    continue;
                }
                all += c.count as u64;
                if let clrprof_model::IlAt::Offset(o) = il.il_at(f.id, s.ips[0], false) {
                    let line = clrprof_load::ppdb::line_in(&pdb.pdb, f.token, clrprof_model::IlAt::Offset(o)).unwrap();
                    *on.entry(line.line).or_default() += c.count as u64;
                }
            }
            _ => {}
        }
    }
    let (sa, sb) = (on.get(&a).copied().unwrap_or(0), on.get(&b).copied().unwrap_or(0));
    assert!(sa + sb >= 120, "enough OSR samples: {on:?}");
    assert!((sa + sb) as f64 >= 0.95 * all as f64, "the loops' samples are OSR code's: {sa}+{sb} of {all}");
    let share = sa as f64 / (sa + sb) as f64;
    eprintln!("lines (OSR): loop A {sa} samples, loop B {sb} samples, of {all}; share {share:.3}");
    assert!((0.70..=0.80).contains(&share), "OSR line {a} has {share:.3} of the loops' samples, expected 0.75 ± 0.05");
    // The profile's frames agree with the hand resolution.
    let c = line_costs(&p);
    assert!(self_ns(&c, &f.name, "Program.cs", a) > 0 && self_ns(&c, &f.name, "Program.cs", b) > 0);
}

#[test]
fn pdbs_are_found_under_symbol_dirs_and_damaged_ones_are_a_clear_message() {
    use clrprof_load::ppdb::{find_pdb, Missing};
    let built = app_dll("Lines").parent().unwrap().to_path_buf();
    let dir = scratch("lines-pdbs");
    let (app, syms) = (dir.join("app"), dir.join("syms"));
    std::fs::create_dir_all(&app).unwrap();
    std::fs::create_dir_all(&syms).unwrap();
    std::fs::copy(built.join("Lines.dll"), app.join("Lines.dll")).unwrap();
    let pdb = std::fs::read(built.join("Lines.pdb")).unwrap();
    // Under --symbols DIR, before the one the assembly's CodeView entry names (obj/…/Lines.pdb).
    std::fs::write(syms.join("Lines.pdb"), &pdb).unwrap();
    let found = find_pdb(&app.join("Lines.dll"), std::slice::from_ref(&syms)).unwrap_or_else(|_| panic!("found"));
    assert_eq!(found.origin, syms.join("Lines.pdb").display().to_string());
    // The PDB of another build (another id) is skipped: its lines would be wrong.
    let mut other = pdb.clone();
    let i = other.windows(16).position(|w| w == found.pdb.guid).expect("the PDB id in the file");
    other[i] ^= 0xff;
    std::fs::write(syms.join("Lines.pdb"), &other).unwrap();
    let f = find_pdb(&app.join("Lines.dll"), std::slice::from_ref(&syms)).unwrap_or_else(|_| panic!("found"));
    assert_ne!(f.origin, syms.join("Lines.pdb").display().to_string(), "a PDB of another build is not used");
    // Damaged bytes anywhere in the PDB or the assembly: an error or a PDB, never a panic (the
    // method's source too).
    let dll = std::fs::read(built.join("Lines.dll")).unwrap();
    for (file, data) in [("Lines.pdb", &pdb), ("Lines.dll", &dll)] {
        for i in (0..data.len()).step_by(11) {
            let mut bad = data.clone();
            bad[i] ^= 0x5a;
            std::fs::write(app.join(file), &bad).unwrap();
            if let Ok(f) = find_pdb(&app.join("Lines.dll"), &[]) {
                for t in 1..8 {
                    let _ = clrprof_load::ppdb::source_of(&f, 0x0600_0000 | t, &[]);
                    let _ = clrprof_load::ppdb::line_in(&f.pdb, 0x0600_0000 | t, clrprof_model::IlAt::Offset(20));
                }
            }
        }
        std::fs::write(app.join(file), data).unwrap();
    }
    // Damaged: every cut of the file is an error or a PDB, never a panic; a cut in the tables
    // names what is wrong.
    for n in (0..pdb.len()).step_by(7) {
        std::fs::write(app.join("Lines.pdb"), &pdb[..n]).unwrap();
        match find_pdb(&app.join("Lines.dll"), &[]) {
            Ok(f) => assert_ne!(f.origin, app.join("Lines.pdb").display().to_string(), "a cut PDB read whole at {n}"),
            Err(Missing::Unusable(why)) => assert!(why.contains("Lines.pdb"), "{why}"),
            Err(Missing::NotFound) => panic!("the cut PDB at {n} is found"),
        }
    }
}

#[test]
fn the_two_loops_resolve_as_ready_to_run_code() {
    let _machine = machine::alone();
    // apps/Lines published with ReadyToRun code (crossgen2): TwoLoops, called once, runs its
    // precompiled code (tier 1 would come after 30 calls; precompiled code has no OSR).
    let base = Path::new(env!("CARGO_TARGET_TMPDIR")).join("lines-r2r");
    let apps = repo_root().join("apps");
    copy_sources(&apps.join("Lines"), &base.join("src/Lines"));
    for f in ["Directory.Build.props", "Directory.Build.targets"] {
        std::fs::copy(apps.join(f), base.join("src").join(f)).unwrap();
    }
    let out_dir = base.join("out");
    let out = std::process::Command::new("dotnet")
        .args(["publish", "-nologo", "-v", "q", "-c", "Release", "-r", "linux-x64", "--self-contained", "false"])
        .arg("-p:PublishReadyToRun=true")
        .arg(base.join("src/Lines"))
        .arg("-o")
        .arg(&out_dir)
        .env("DOTNET_CLI_TELEMETRY_OPTOUT", "1")
        .env("DOTNET_NOLOGO", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "publish: {}{}", text(&out.stdout), text(&out.stderr));
    let dir = scratch("lines-r2r");
    let trace = dir.join("lines.clrprof");
    let out = std::process::Command::new(clrprof_exe())
        .arg("record")
        .arg("-o")
        .arg(&trace)
        .arg("--agent")
        .arg(agent_path())
        .args(RATE)
        .arg("--")
        .arg("dotnet")
        .arg(out_dir.join("Lines.dll"))
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "record: {}{}", text(&out.stdout), text(&out.stderr));
    let p = profile_with_lines(&trace, Vec::new());
    let f = p.functions.iter().find(|f| f.name == "Lines.Loops.TwoLoops").expect("TwoLoops");
    assert_eq!(f.kind_name(), "precompiled", "TwoLoops ran its ReadyToRun code");
    assert_eq!(f.compilations, 1, "and no other version");
    let program = repo_root().join("apps/Lines/Program.cs");
    let (a, b) = (marker(&program, "A"), marker(&program, "B"));
    let c = line_costs(&p);
    let (sa, sb) = (self_ns(&c, &f.name, "Program.cs", a), self_ns(&c, &f.name, "Program.cs", b));
    let share = sa as f64 / (sa + sb) as f64;
    eprintln!("lines (ReadyToRun): loop A {sa} ns, loop B {sb} ns, share {share:.3}");
    assert!(sa + sb >= 100_000_000, "enough CPU on the two loops: {sa} + {sb} ns");
    assert!((sa + sb) as f64 >= 0.97 * function_self_ns(&c, &f.name) as f64, "{c:?}");
    assert!((0.70..=0.80).contains(&share), "line {a} has {share:.3} of the loops' CPU, expected 0.75 ± 0.05");
}

/// perf samples the same run at 999 Hz (`perf record -- clrprof record -- dotnet Lines.dll`): its
/// instruction pointers in TwoLoops' code, resolved through the IL maps clrprof recorded and the
/// PDB, split 3:1 between the two loop lines as clrprof's own samples do. An independent sampler's
/// IPs, so a wrong resolution of clrprof's IPs would not pass by agreeing with itself.
#[test]
fn perf_ips_resolve_to_the_same_lines() {
    let _machine = machine::alone();
    let perf_ok = std::process::Command::new("perf").arg("--version").output().is_ok_and(|o| o.status.success());
    assert!(perf_ok, "the cross-check needs `perf` (Debian's linux-perf; scripts/bootstrap installs it)");
    let dir = scratch("lines-perf");
    let (data, trace) = (dir.join("perf.data"), dir.join("lines.clrprof"));
    let out = std::process::Command::new("perf")
        .args(["record", "-e", "cpu-clock", "-F", "999", "-q", "-o"])
        .arg(&data)
        .arg("--")
        .arg(clrprof_exe())
        .arg("record")
        .arg("-o")
        .arg(&trace)
        .arg("--agent")
        .arg(agent_path())
        .args(RATE)
        .arg("--")
        .arg("dotnet")
        .arg(app_dll("Lines"))
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run perf record");
    assert!(out.status.success(), "perf record: {}", text(&out.stderr));
    let (records, _) = clrprof_trace::read_all(std::fs::File::open(&trace).unwrap()).unwrap();
    let pid = records
        .iter()
        .find_map(|r| match r {
            clrprof_trace::Record::ProcessStart(p) => Some(p.pid),
            _ => None,
        })
        .unwrap();
    let p = profile_with_lines(&trace, Vec::new());
    let f = p.functions.iter().find(|f| f.name == "Lines.Loops.TwoLoops").unwrap();
    let mut maps = clrprof_model::lines::IlMaps::default();
    let mut ranges = Vec::new();
    for r in &records {
        match r {
            clrprof_trace::Record::IlMap(m) if m.id == f.id => maps.add(m.id, m.code_start, &m.entries),
            clrprof_trace::Record::CodeRange(c) if c.id == f.id => ranges.push((c.start, c.start + c.size)),
            _ => {}
        }
    }
    let pdb = clrprof_load::ppdb::find_pdb(&app_dll("Lines"), &[]).unwrap_or_else(|_| panic!("Lines.pdb"));
    let script = std::process::Command::new("perf").args(["script", "-F", "pid,ip", "-i"]).arg(&data).output().unwrap();
    let program = repo_root().join("apps/Lines/Program.cs");
    let (a, b) = (marker(&program, "A"), marker(&program, "B"));
    let mut on: HashMap<u32, u64> = HashMap::new();
    let mut in_code = 0u64;
    for l in text(&script.stdout).lines() {
        let mut w = l.split_whitespace();
        let (Some(sp), Some(sip)) = (w.next(), w.next()) else { continue };
        let (Ok(spid), Ok(ip)) = (sp.parse::<u32>(), u64::from_str_radix(sip, 16)) else { continue };
        if spid != pid || !ranges.iter().any(|&(s, e)| (s..e).contains(&ip)) {
            continue;
        }
        in_code += 1;
        if let Some(line) = clrprof_load::ppdb::line_in(&pdb.pdb, f.token, maps.il_at(f.id, ip, false)) {
            *on.entry(line.line).or_default() += 1;
        }
    }
    let (pa, pb) = (on.get(&a).copied().unwrap_or(0), on.get(&b).copied().unwrap_or(0));
    let perf_share = pa as f64 / (pa + pb) as f64;
    let c = line_costs(&p);
    let (sa, sb) = (self_ns(&c, &f.name, "Program.cs", a), self_ns(&c, &f.name, "Program.cs", b));
    let ours = sa as f64 / (sa + sb) as f64;
    eprintln!("lines (perf): loop A {pa}, loop B {pb} of {in_code} perf samples in TwoLoops: {perf_share:.3}; clrprof {ours:.3}");
    assert!(pa + pb >= 500, "perf samples on the loops: {on:?} of {in_code}");
    assert!((pa + pb) as f64 >= 0.95 * in_code as f64, "perf's samples in TwoLoops are on its loop lines: {on:?}");
    assert!((0.70..=0.80).contains(&perf_share), "perf: line {a} has {perf_share:.3}, expected 0.75 ± 0.05");
    assert!((perf_share - ours).abs() <= 0.03, "perf {perf_share:.3} and clrprof {ours:.3} agree within 0.03");
}
