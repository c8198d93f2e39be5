//! Shared harness for end-to-end tests: builds the C# apps in `apps/` once, runs them under
//! `clrprof record` and reads reports back as JSON.
#![allow(dead_code)]

pub mod csv;
pub mod machine;
pub mod otlp;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, OnceLock};

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("repo root")
}

pub fn clrprof_exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_clrprof"))
}

/// The agent built next to the clrprof binary (`cargo build --workspace`).
pub fn agent_path() -> PathBuf {
    let p = clrprof_exe().parent().unwrap().join("libclrprof_agent.so");
    assert!(
        p.is_file(),
        "{} is missing: run `cargo build --workspace` before the tests (scripts/test does)",
        p.display()
    );
    p
}

/// Builds `apps/<name>` (once per test binary) and returns the path of its dll.
pub fn app_dll(name: &str) -> PathBuf {
    static BUILT: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let m = BUILT.get_or_init(|| Mutex::new(HashMap::new()));
    let mut built = m.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = built.get(name) {
        return p.clone();
    }
    let dir = repo_root().join("apps").join(name);
    let out = Command::new("dotnet")
        .args(["build", "-nologo", "-v", "q", "-c", "Release"])
        .arg(&dir)
        .env("DOTNET_CLI_TELEMETRY_OPTOUT", "1")
        .env("DOTNET_NOLOGO", "1")
        .output()
        .expect("`dotnet` is required for the end-to-end tests (install the .NET SDK)");
    assert!(
        out.status.success(),
        "dotnet build {} failed:\n{}{}",
        dir.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let dll = dir.join("bin/Release/net10.0").join(format!("{name}.dll"));
    assert!(dll.is_file(), "{} missing after build", dll.display());
    built.insert(name.to_string(), dll.clone());
    dll
}

/// The runtimes of the end-to-end matrix (the `runtimes` module): target framework and the runtime
/// version its apps are published with. .NET 8 and 9 are pinned to patches the package feed has (the
/// SDK would ask for its own idea of the latest patch); .NET 10 takes the SDK's own runtime.
pub const RUNTIMES: [(&str, Option<&str>); 3] =
    [("net8.0", Some("8.0.33")), ("net9.0", Some("9.0.22")), ("net10.0", None)];

/// Copies an app's sources (not its `bin`/`obj`) from `from` into `to`.
pub fn copy_sources(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let name = e.file_name();
        if e.file_type().unwrap().is_dir() {
            if name != "bin" && name != "obj" {
                copy_sources(&e.path(), &to.join(&name));
            }
        } else {
            let dest = to.join(&name);
            // Keep the copy's time stamp when nothing changed: the publish stays incremental.
            if std::fs::read(&dest).ok() != Some(std::fs::read(e.path()).unwrap()) {
                std::fs::copy(e.path(), &dest).unwrap();
            }
        }
    }
}

/// Publishes `apps/<name>` self-contained for `runtime` (a target framework of `RUNTIMES`), once per
/// test binary, and returns its executable (the apphost). The sources are copied under the test
/// target's scratch directory so the publish never touches `apps/<name>/obj` (where `app_dll` builds
/// for .NET 10); the runtime packs come through the publish's NuGet restore.
pub fn app_for(runtime: &str, name: &str) -> PathBuf {
    static BUILT: OnceLock<Mutex<HashMap<(String, String), PathBuf>>> = OnceLock::new();
    let m = BUILT.get_or_init(|| Mutex::new(HashMap::new()));
    let mut built = m.lock().unwrap_or_else(|e| e.into_inner());
    let key = (runtime.to_string(), name.to_string());
    if let Some(p) = built.get(&key) {
        return p.clone();
    }
    let (_, pin) = RUNTIMES
        .iter()
        .find(|(tfm, _)| *tfm == runtime)
        .unwrap_or_else(|| panic!("{runtime} is not one of {RUNTIMES:?}"));
    let apps = repo_root().join("apps");
    let base = Path::new(env!("CARGO_TARGET_TMPDIR")).join("runtimes").join(runtime);
    let src = base.join("src");
    copy_sources(&apps.join(name), &src.join(name));
    for f in ["Directory.Build.props", "Directory.Build.targets"] {
        std::fs::copy(apps.join(f), src.join(f)).unwrap();
    }
    let out_dir = base.join("out").join(name);
    let mut c = Command::new("dotnet");
    c.args(["publish", "-nologo", "-v", "q", "-c", "Release", "-r", "linux-x64", "--self-contained"])
        .arg(src.join(name))
        .arg("-o")
        .arg(&out_dir)
        .arg(format!("-p:AppTfm={runtime}"))
        // Only the runtime pack of Microsoft.NETCore.App, not ASP.NET Core's.
        .arg("-p:DisableTransitiveFrameworkReferenceDownloads=true")
        .env("DOTNET_CLI_TELEMETRY_OPTOUT", "1")
        .env("DOTNET_NOLOGO", "1");
    if let Some(v) = pin {
        c.arg(format!("-p:RuntimeFrameworkVersion={v}")).arg(format!("-p:AppTargetingPackVersion={v}"));
    }
    let out = c.output().expect("`dotnet` is required for the end-to-end tests (install the .NET SDK)");
    assert!(
        out.status.success(),
        "dotnet publish {name} for {runtime} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let exe = out_dir.join(name);
    assert!(exe.is_file(), "{} missing after publish", exe.display());
    built.insert(key, exe.clone());
    exe
}

/// `clrprof record -o <trace> [extra] -- <app's apphost> args` on the app published for `runtime`.
pub fn record_on(runtime: &str, app: &str, args: &[&str], trace: &Path, extra: &[&str]) -> Output {
    let exe = app_for(runtime, app);
    let mut c = Command::new(clrprof_exe());
    c.arg("record").arg("-o").arg(trace).arg("--agent").arg(agent_path());
    c.args(extra).arg("--").arg(&exe).args(args).stdin(Stdio::null());
    c.output().expect("run clrprof record")
}

/// A fresh scratch directory for one test. It is removed when the test binary exits, unless the
/// test that made it failed (kept to look at) or `CLRPROF_KEEP_SCRATCH` is set: traces are tens of
/// megabytes, and a suite run used to leave hundreds of them in the temporary directory.
/// The name must be unique in the suite: all modules share one process, hence one set of names.
pub fn scratch(test: &str) -> PathBuf {
    claim_scratch_name(test);
    let d = std::env::temp_dir().join(format!("clrprof-test-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    if std::env::var_os("CLRPROF_KEEP_SCRATCH").is_none() {
        remove_at_exit(&d);
    }
    d
}

/// Fails the second test that asks for a scratch name another test of the run already has: two tests
/// at once in one directory would remove or overwrite each other's traces.
fn claim_scratch_name(name: &str) {
    static CLAIMED: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());
    let mut claimed = CLAIMED.lock().unwrap_or_else(|e| e.into_inner());
    let me = test_name();
    if let Some((_, other)) = claimed.iter().find(|(n, t)| n == name && *t != me) {
        panic!("scratch name {name:?} is already used by {other}: give each test its own");
    }
    claimed.push((name.to_string(), me));
}

/// Scratch directories and the tests (threads) that made them; the tests that panicked.
static SCRATCH: Mutex<Vec<(PathBuf, String)>> = Mutex::new(Vec::new());
static FAILED: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn test_name() -> String {
    let t = std::thread::current();
    t.name().map(str::to_string).unwrap_or_else(|| format!("{:?}", t.id()))
}

fn remove_at_exit(dir: &Path) {
    static HOOKS: std::sync::Once = std::sync::Once::new();
    HOOKS.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if let Ok(mut f) = FAILED.lock() {
                f.push(test_name());
            }
            previous(info)
        }));
        extern "C" fn remove_scratch() {
            let failed = FAILED.lock().map(|f| f.clone()).unwrap_or_default();
            let Ok(dirs) = SCRATCH.lock() else { return };
            for (d, test) in dirs.iter() {
                if !failed.contains(test) {
                    let _ = std::fs::remove_dir_all(d);
                }
            }
        }
        // Safety: registers a plain function with the C library, run once at exit.
        unsafe { libc::atexit(remove_scratch) };
    });
    if let Ok(mut s) = SCRATCH.lock() {
        s.push((dir.to_path_buf(), test_name()));
    }
}

/// `clrprof record -o <trace> [extra] -- dotnet <app.dll> args`.
pub fn record(app: &str, args: &[&str], trace: &Path, extra: &[&str]) -> Output {
    let dll = app_dll(app);
    let mut c = Command::new(clrprof_exe());
    c.arg("record").arg("-o").arg(trace);
    if !extra.contains(&"--agent") {
        c.arg("--agent").arg(agent_path());
    }
    c.args(extra).arg("--").arg("dotnet").arg(&dll);
    c.args(args).stdin(Stdio::null());
    c.output().expect("run clrprof record")
}

/// Runs the app without any profiler.
pub fn run_plain(app: &str, args: &[&str]) -> Output {
    Command::new("dotnet").arg(app_dll(app)).args(args).stdin(Stdio::null()).output().expect("run dotnet")
}

pub fn report(trace: &Path, extra: &[&str]) -> Output {
    Command::new(clrprof_exe()).arg("report").arg(trace).args(extra).output().expect("run clrprof report")
}

pub fn export(trace: &Path, args: &[&str]) -> Output {
    Command::new(clrprof_exe()).arg("export").arg(trace).args(args).output().expect("run clrprof export")
}

pub fn report_json(trace: &Path) -> serde_json::Value {
    report_json_with(trace, &[])
}

/// `report --format json --per-thread`: with every thread's hot spots and timeline row.
pub fn report_json_per_thread(trace: &Path) -> serde_json::Value {
    report_json_with(trace, &["--per-thread"])
}

/// `report --format json` with `extra` options, parsed.
pub fn report_json_with(trace: &Path, extra: &[&str]) -> serde_json::Value {
    let out = report(trace, &[&["--format", "json"], extra].concat());
    assert!(out.status.success(), "report failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("report JSON parses")
}

pub fn names(v: &serde_json::Value, table: &str, field: &str) -> Vec<String> {
    v[table].as_array().unwrap().iter().filter_map(|x| x[field].as_str().map(String::from)).collect()
}

pub fn find<'a>(v: &'a serde_json::Value, table: &str, name: &str) -> &'a serde_json::Value {
    v[table]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == name)
        .unwrap_or_else(|| panic!("no {table} entry named {name:?}; have: {:?}", names(v, table, "name")))
}

pub fn text(o: &[u8]) -> String {
    String::from_utf8_lossy(o).into_owned()
}

/// Kills a child process when dropped (tests never leave strays).
pub struct KillOnDrop(pub std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The callers of `function` in the callers view: (inclusive ms, [(caller, ms)]), as printed.
pub fn callers(trace: &Path, function: &str, weight: &str) -> (f64, Vec<(String, f64)>) {
    let out = report(trace, &["--view", "callers", "--function", function, "--weight", weight]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let t = text(&out.stdout);
    let inclusive: f64 = t
        .lines()
        .find_map(|l| l.split("inclusive ").nth(1))
        .and_then(|r| r.split(" ms").next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no inclusive time for {function}:\n{t}"));
    let mut found = Vec::new();
    for l in t.lines().skip_while(|l| !l.starts_with("CALLERS (")).skip(2).take_while(|l| !l.trim().is_empty()) {
        let mut cols = l.split_whitespace();
        let (_calls, ms, _pct) = (cols.next(), cols.next(), cols.next());
        let name = cols.collect::<Vec<_>>().join(" ");
        found.push((name, ms.and_then(|m| m.parse().ok()).unwrap_or_else(|| panic!("bad line {l:?}"))));
    }
    (inclusive, found)
}

/// `function` is called from `caller` only, in the stacks of `weight`, and the caller's time
/// through it is at least 90% of the function's own inclusive time. One exception, bounded: a
/// sample taken inside the runtime while it moves the running method to its OSR version (the
/// patchpoint helper in libcoreclr is then under the method for a few instructions) can show
/// libcoreclr as the caller; such callers may hold at most 2% of the inclusive time.
/// apps/Sampling `osr`: each OSR method's CPU and wall time lies under its one real caller (the
/// same expectations on every runtime).
pub fn osr_callers_are_exact(trace: &Path) {
    for weight in ["cpu", "wall"] {
        let wall = weight == "wall";
        only_caller(trace, "Sampling.Osr.Spin", "Sampling.Program.Main", weight, 650.0);
        only_caller(
            trace,
            "Sampling.Osr.SpinThenSleep",
            "Sampling.Program.Main",
            weight,
            if wall { 700.0 } else { 200.0 },
        );
        only_caller(trace, "Sampling.Osr.Catch", "Sampling.Program.Main", weight, if wall { 850.0 } else { 500.0 });
        only_caller(trace, "Sampling.Osr.SpinInCatch", "Sampling.Osr.Catch", weight, 450.0);
    }
}

pub fn only_caller(trace: &Path, function: &str, caller: &str, weight: &str, min_ms: f64) {
    let (inclusive, found) = callers(trace, function, weight);
    assert!(inclusive >= min_ms, "{weight}: {function} has {inclusive} ms inclusive, expected {min_ms} ms or more");
    let (runtime, others): (Vec<_>, Vec<_>) = found.iter().partition(|(n, _)| n.starts_with("libcoreclr.so!"));
    let names: Vec<&str> = others.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, [caller], "{weight}: callers of {function}: {found:?}");
    let in_runtime: f64 = runtime.iter().map(|(_, ms)| ms).sum();
    assert!(in_runtime <= inclusive * 0.02, "{weight}: {in_runtime} ms of {function} under the runtime: {found:?}");
    let through = others[0].1;
    assert!(through >= inclusive * 0.9, "{weight}: {caller} → {function} {through} ms of {inclusive} ms");
}

/// The call count of a function in the JSON report (instrumented traces).
pub fn calls(v: &serde_json::Value, name: &str) -> u64 {
    find(v, "functions", name)["calls"].as_u64().unwrap_or_else(|| panic!("{name} has no call count"))
}

/// The names of the functions of a JSON report with at least one call counted, in report order.
pub fn names_with_calls(v: &serde_json::Value) -> Vec<&str> {
    v["functions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["calls"].as_u64().unwrap_or(0) > 0)
        .map(|f| f["name"].as_str().unwrap())
        .collect()
}

/// The exact counts of `apps/Calls` run whole under `--instrument` (one run of every scenario),
/// checked in its JSON report with `--per-thread` (the per-thread tables): the same on every runtime.
pub fn check_calls_app(v: &serde_json::Value) {
    assert_eq!(calls(v, "Calls.Counted.Tick"), 1000);
    assert_eq!(calls(v, "Calls.Counted.Run"), 1);
    // fib(20) makes 2·fib(21) − 1 calls.
    assert_eq!(calls(v, "Calls.Recursion.Fib"), 21891);
    // Exceptions through three frames with a finally and a filter, 50 times.
    for f in
        ["Calls.Exceptions.Level1", "Calls.Exceptions.Level2", "Calls.Exceptions.Level3", "Calls.ProbeException..ctor"]
    {
        assert_eq!(calls(v, f), 50, "{f}");
    }
    assert_eq!(calls(v, "Calls.ProbeException.get_Depth"), 50, "the filter ran 50 times");
    assert_eq!(calls(v, "Calls.Exceptions.Run"), 1);
    // Virtual and interface dispatch.
    assert_eq!(calls(v, "Calls.Square.Area"), 100);
    assert_eq!(calls(v, "Calls.Circle.Area"), 100);
    assert_eq!(calls(v, "Calls.Triangle.Area"), 100);
    assert_eq!(calls(v, "Calls.Shape.Describe"), 200);
    assert_eq!(calls(v, "Calls.Circle.Describe"), 100);
    // A generic method with two instantiations (value type and shared reference-type code).
    assert_eq!(calls(v, "Calls.Generic.Identity<int>"), 100);
    assert_eq!(calls(v, "Calls.Generic.Identity<__Canon>"), 100);
    // The same method on 4 threads.
    assert_eq!(calls(v, "Calls.Shared.Work"), 10_000);
    let workers: Vec<&serde_json::Value> = v["thread_hotspots"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["name"].as_str().unwrap_or("").starts_with("calls-worker-"))
        .collect();
    assert_eq!(workers.len(), 4);
    for t in workers {
        let work = t["functions"].as_array().unwrap().iter().find(|f| f["name"] == "Calls.Shared.Work").unwrap();
        assert_eq!(work["calls"], 2500, "{}", t["name"]);
    }
    // Async methods: every awaited step is counted, whichever thread resumed it.
    assert_eq!(calls(v, "Calls.AsyncWork.Step"), 10);
    assert_eq!(calls(v, "Calls.AsyncWork.Run"), 1);
    // A method spinning ~300 ms shows at least 280 ms inclusive.
    let spin = find(v, "functions", "Calls.Spin.For");
    assert_eq!(spin["calls"], 1);
    assert!(spin["inclusive_ns"].as_u64().unwrap() >= 280_000_000, "{spin}");
    // Induced GCs suspend the runtime: that time is suspended time, not exclusive time.
    let gc = find(v, "functions", "Calls.Collector.Run");
    assert_eq!(gc["calls"], 1);
    assert!(gc["suspended_ns"].as_u64().unwrap() > 0, "{gc}");
    for f in v["functions"].as_array().unwrap() {
        if let (Some(i), Some(e)) = (f["inclusive_ns"].as_u64(), f["exclusive_ns"].as_u64()) {
            assert!(i >= e, "{}: inclusive {i} < exclusive {e}", f["name"]);
        }
    }
}

/// The exception group of a type in the JSON report.
pub fn exception_group<'a>(v: &'a serde_json::Value, type_name: &str) -> &'a serde_json::Value {
    v["exceptions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == type_name)
        .unwrap_or_else(|| panic!("no exception group {type_name}: {}", v["exceptions"]))
}

/// `apps/Events exceptions N`, all observed: N `BoomException`s thrown by `Thrower`, each through
/// one filter, one `finally` and four frames searched and unwound, all caught in `Catcher`, from
/// one throw stack. Returns the group for the caller's further checks.
pub fn check_boom_exceptions(v: &serde_json::Value, n: u64) -> &serde_json::Value {
    let g = exception_group(v, "EventsApp.BoomException");
    assert_eq!(g["thrown"], n);
    assert_eq!(g["caught"], n);
    assert_eq!(g["uncaught"], 0);
    assert_eq!(g["throw_site"], "EventsApp.Program.Thrower");
    assert_eq!(g["passes"]["filters"], n, "one filter run per exception");
    assert_eq!(g["passes"]["finallies"], n, "one finally per exception");
    assert_eq!(g["passes"]["catches"], n);
    // Thrower, Inner, Middle and Catcher are searched and unwound once each.
    assert_eq!(g["passes"]["search_frames"], 4 * n);
    assert_eq!(g["passes"]["unwind_frames"], 4 * n);
    assert_eq!(g["catch_sites"], serde_json::json!([{"function": "EventsApp.Program.Catcher", "count": n}]));
    let sites = g["sites"].as_array().unwrap();
    assert_eq!(sites.len(), 1, "one throw stack: {sites:?}");
    let stack: Vec<&str> = sites[0]["stack"].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
    assert_eq!(
        &stack[..4],
        [
            "EventsApp.Program.Thrower",
            "EventsApp.Program.Inner",
            "EventsApp.Program.Middle",
            "EventsApp.Program.Catcher"
        ]
    );
    g
}

/// A `clrprof collect` child process; its log is collected as it runs.
pub struct Collector {
    pub child: KillOnDrop,
    pub addr: String,
    log: std::sync::Arc<Mutex<String>>,
}

impl Collector {
    pub fn start(store: &str, listen: &str, extra: &[&str]) -> Collector {
        use std::io::BufRead;
        let mut child = Command::new(clrprof_exe())
            .args(["collect", "--store", store, "--listen", listen])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start clrprof collect");
        let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
        // Killed even if the start-up checks below fail.
        let child = KillOnDrop(child);
        // Lines before "listening on" (runs recovered from a previous collector) are kept too.
        let mut first = String::new();
        let addr = loop {
            let mut line = String::new();
            assert!(err.read_line(&mut line).unwrap() > 0, "collector ended: {first}");
            first.push_str(&line);
            if let Some(rest) = line.strip_prefix("clrprof collect: listening on ") {
                break rest.split([',', ' ']).next().unwrap().to_string();
            }
        };
        let log = std::sync::Arc::new(Mutex::new(first));
        let l = std::sync::Arc::clone(&log);
        std::thread::spawn(move || {
            let mut line = String::new();
            while err.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
                l.lock().unwrap().push_str(&line);
                line.clear();
            }
        });
        Collector { child, addr, log }
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    pub fn port(&self) -> u16 {
        self.addr.rsplit(':').next().unwrap().parse().unwrap()
    }

    pub fn kill9(&mut self) {
        // Safety: signalling our own child.
        unsafe { libc::kill(self.child.0.id() as i32, libc::SIGKILL) };
        let _ = self.child.0.wait();
    }

    pub fn wait_for(&self, what: &str) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !self.log().contains(what) {
            assert!(std::time::Instant::now() < deadline, "collector never logged {what:?}:\n{}", self.log());
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

/// Folded stacks of one weight (`export -f collapsed`): frames root first, and the weight.
pub fn folded(trace: &Path, weight: &str) -> Vec<(Vec<String>, f64)> {
    folded_thread(trace, weight, None)
}

/// [`folded`] of one thread (`--thread`), or of all with `None`.
pub fn folded_thread(trace: &Path, weight: &str, thread: Option<&str>) -> Vec<(Vec<String>, f64)> {
    let mut args = vec!["-f", "collapsed", "-w", weight, "-o", "-"];
    if let Some(t) = thread {
        args.extend(["--thread", t]);
    }
    let out = export(trace, &args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let (stack, n) = l.rsplit_once(' ').unwrap_or_else(|| panic!("bad folded line {l:?}"));
            (
                stack.split(';').map(str::to_string).collect(),
                n.parse().unwrap_or_else(|_| panic!("bad weight in {l:?}")),
            )
        })
        .collect()
}

/// A trace sampled and instrumented in the same run (`--instrument` with sampling on): every
/// call the program made is in the hooks' call tree, so each caller → callee step between two
/// hooked methods of a CPU sample must be an edge of it. A walk that loses a frame (a leaf in its
/// prolog, a frameless leaf) or takes a stale return address for a caller breaks that: walks with
/// those faults broke it for 1.2–1.3% of the sample weight on every runtime, correct walks for none
/// or one sample, so at most 0.2% passes. The 400 ms floor of CPU samples keeps 0.2% meaningful;
/// on a fast host 6 rounds of JsonBench gave 369 ms, so the callers run 12.
pub fn samples_follow_the_exact_call_graph(trace: &Path) {
    let exact = folded(trace, "calls");
    let names: std::collections::HashSet<&str> = exact.iter().flat_map(|(f, _)| f.iter().map(String::as_str)).collect();
    let edges: std::collections::HashSet<(&str, &str)> =
        exact.iter().flat_map(|(f, _)| f.windows(2).map(|p| (p[0].as_str(), p[1].as_str()))).collect();
    let cpu = folded(trace, "cpu");
    let total: f64 = cpu.iter().map(|(_, w)| w).sum();
    let mut wrong = Vec::new();
    for (frames, w) in &cpu {
        // Native frames, runtime activities and the hooks are not in the call tree.
        let managed: Vec<&str> = frames.iter().map(String::as_str).filter(|f| names.contains(f)).collect();
        if let Some(p) = managed.windows(2).find(|p| !edges.contains(&(p[0], p[1]))) {
            wrong.push((*w, format!("{} -> {}", p[0], p[1])));
        }
    }
    let bad: f64 = wrong.iter().map(|(w, _)| w).sum();
    assert!(total >= 400.0, "CPU samples of {total} ms");
    // Two single samples off the graph (2 of 876 ms, a leaf's caller skipped) were seen once in a
    // full suite run on a loaded machine (2026-11-29): two samples' weight pass as well.
    let one_sample = cpu.iter().map(|(_, w)| *w).filter(|w| *w > 0.0).fold(f64::INFINITY, f64::min);
    let allowed = (total * 0.002).max(2.0 * one_sample);
    assert!(bad <= allowed, "{bad} of {total} ms of samples step along no call the hooks saw: {wrong:#?}");
}

/// The all-threads rows of the hot spots of one weight (`report --view hotspots --format csv`):
/// (function, exclusive ms, inclusive ms), in the report's order.
pub fn hotspot_rows(trace: &Path, weight: &str) -> Vec<(String, f64, f64)> {
    let out = report(trace, &["--view", "hotspots", "--weight", weight, "--format", "csv"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let t = text(&out.stdout);
    let mut lines = t.lines();
    let header: Vec<&str> = lines.next().expect("a header").split(';').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap_or_else(|| panic!("no {name} in {header:?}"));
    let (thread, function, excl, incl) =
        (col("Thread ID"), col("Function"), col("Exclusive Time"), col("Inclusive Time"));
    lines
        .map(|l| l.split(';').collect::<Vec<_>>())
        .filter(|c| c[thread] == "all")
        .map(|c| (c[function].to_string(), c[excl].parse().unwrap(), c[incl].parse().unwrap()))
        .collect()
}

/// Runs one of the viewer's browser scripts (crates/clrprof-view/e2e/SCRIPT, Node with
/// playwright-core and Chromium) with `CLRPROF`, `CHROMIUM`, `SCREENSHOTS` (from
/// CLRPROF_SCREENSHOTS) and `envs` set; it passes when it exits 0 and prints `done`.
pub fn run_browser_script(script: &str, done: &str, envs: &[(&str, &std::ffi::OsStr)]) {
    let e2e = repo_root().join("crates/clrprof-view/e2e");
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    assert!(
        Path::new(&chromium).is_file() && e2e.join("node_modules/playwright-core").is_dir(),
        "the browser test needs {chromium} and playwright-core in {}: run scripts/bootstrap",
        e2e.display()
    );
    let mut c = Command::new("node");
    c.arg(script)
        .current_dir(&e2e)
        .env("CLRPROF", clrprof_exe())
        .env("CHROMIUM", &chromium)
        .envs(envs.iter().copied())
        .stdin(Stdio::null());
    if let Ok(shots) = std::env::var("CLRPROF_SCREENSHOTS") {
        c.env("SCREENSHOTS", shots);
    }
    let out = c.output().expect("run node");
    assert!(
        out.status.success() && text(&out.stdout).contains(done),
        "stdout: {}\nstderr: {}",
        text(&out.stdout),
        text(&out.stderr)
    );
}
