//! Logical async stacks and awaiting time (`record --async`) against programs of known shape.
//!
//! apps/AsyncShape runs requests through `Task.Run`, four at a time: `Shop.Orders.HandleAsync`
//! awaits `Task.Delay`, computes (`Shop.Orders.Compute`), awaits `Shop.Inventory.LoadAsync` (which
//! awaits `Task.Delay`, then parses: `Shop.Inventory.Parse`) and renders (`Shop.Orders.Render`),
//! resumed by `LoadAsync`'s completion on its thread — physically *under* the callee. The app
//! measures with Stopwatch the time each method spends awaiting what, which the profile's
//! `[await]` wall time must match. apps/WebEf (ASP.NET Core + EF Core) checks that a real service's
//! handler work stays under its endpoint handler.

use crate::common::*;

use std::collections::HashMap;
use std::path::Path;

/// The app's `key … value` lines: `await_ns <awaiting method> <awaited>`, `work_ns <method>`, …
fn sums(out: &std::process::Output) -> HashMap<String, f64> {
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "exit {:?}\n{stdout}\n{}", out.status, text(&out.stderr));
    stdout
        .lines()
        .filter_map(|l| l.rsplit_once(' '))
        .filter_map(|(k, v)| Some((k.to_string(), v.trim().parse().ok()?)))
        .collect()
}

/// Weight of the folded stacks holding `path` as consecutive frames.
fn under(folded: &[(Vec<String>, f64)], path: &[&str]) -> f64 {
    folded
        .iter()
        .filter(|(f, _)| f.windows(path.len()).any(|w| w.iter().zip(path).all(|(a, b)| a == b)))
        .map(|(_, n)| n)
        .sum()
}

/// Weight of the stacks holding frame `name`.
fn with(folded: &[(Vec<String>, f64)], name: &str) -> f64 {
    folded.iter().filter(|(f, _)| f.iter().any(|x| x == name)).map(|(_, n)| n).sum()
}

/// Weight of the stacks where `inner` is called (at any depth) under a frame containing `outer`.
fn nested(folded: &[(Vec<String>, f64)], outer: &str, inner: &str) -> f64 {
    folded
        .iter()
        .filter(|(f, _)| f.iter().position(|x| x == inner).is_some_and(|i| f[..i].iter().any(|x| x.contains(outer))))
        .map(|(_, n)| n)
        .sum()
}

const HANDLER: &str = "Shop.Orders.HandleAsync";
const LOAD: &str = "Shop.Inventory.LoadAsync";

fn check_shape(trace: &Path, s: &HashMap<String, f64>, runtime: &str) {
    assert_eq!(s.get("requests"), Some(&60.0), "{runtime}");
    let cpu = folded(trace, "cpu");
    let wall = folded(trace, "wall");

    // CPU of the code that runs after an await, under its logical async callers: the Task.Run
    // creator (Main), the handler, the resume marker.
    let logical: [(&str, Vec<&str>); 3] = [
        ("Shop.Orders.Compute", vec![HANDLER, "[resumed]", "Shop.Orders.Compute"]),
        ("Shop.Inventory.Parse", vec![HANDLER, "[resumed]", LOAD, "[resumed]", "Shop.Inventory.Parse"]),
        ("Shop.Orders.Render", vec![HANDLER, "[resumed]", "Shop.Orders.Render"]),
    ];
    let (mut all, mut placed) = (0.0, 0.0);
    for (name, path) in &logical {
        all += with(&cpu, name);
        placed += cpu
            .iter()
            .filter(|(f, _)| f.iter().any(|x| x == "[task]") && f.iter().any(|x| x == "Shop.Program.Main"))
            .filter(|(f, _)| f.windows(path.len()).any(|w| w.iter().zip(path).all(|(a, b)| a == b)))
            .map(|(_, n)| n)
            .sum::<f64>();
    }
    assert!(all >= 20.0, "{runtime}: too few CPU samples after awaits ({all}) to judge");
    eprintln!("{runtime}: {placed} of {all} CPU samples after an await under their logical callers");
    assert!(placed >= 0.9 * all, "{runtime}: {placed} of {all} CPU samples after an await under their logical callers");

    // A resumed caller is never under the callee that completed — though it ran there
    // physically (the physical stacks show it, so the check means something).
    for w in [&cpu, &wall] {
        assert_eq!(nested(w, LOAD, "Shop.Orders.Render"), 0.0, "{runtime}: Render under LoadAsync");
        assert_eq!(nested(w, LOAD, "Shop.Orders.Compute"), 0.0, "{runtime}");
    }
    let physical = export(trace, &["-f", "collapsed", "-w", "cpu", "--physical-stacks", "-o", "-"]);
    assert!(physical.status.success(), "{}", text(&physical.stderr));
    let physical: Vec<(Vec<String>, f64)> = text(&physical.stdout)
        .lines()
        .filter_map(|l| l.rsplit_once(' '))
        .map(|(st, n)| (st.split(';').map(str::to_string).collect(), n.parse().unwrap()))
        .collect();
    let render = with(&physical, "Shop.Orders.Render");
    assert!(
        render > 0.0 && nested(&physical, "<LoadAsync>", "Shop.Orders.Render") >= 0.5 * render,
        "{runtime}: physically, Render ran under LoadAsync"
    );
    assert!(
        physical.iter().all(|(f, _)| !f.iter().any(|x| x.starts_with("[resumed]") || x.starts_with("[await]"))),
        "{runtime}"
    );

    // Awaiting time: wall time (samples at 100 Hz: 10 ms each) under each awaiting method's
    // `[await] Task.Delay` frame, against the app's own Stopwatch sums of those awaits.
    let ms = |samples: f64| samples * 10.0;
    let checks = [
        (
            "HandleAsync awaits Task.Delay",
            under(&wall, &[HANDLER, "[await] Task.Delay"]),
            s["await_ns Shop.Orders.HandleAsync Task.Delay"],
        ),
        (
            "LoadAsync awaits Task.Delay",
            under(&wall, &[LOAD, "[await] Task.Delay"]),
            s["await_ns Shop.Inventory.LoadAsync Task.Delay"],
        ),
    ];
    // The await of the async callee as a whole: the callee's own awaiting time plus the wall time
    // of its continuation (Parse), which the continuation's events measure (the wall sampler alone
    // gave it the time of whatever ran before or after it on the thread).
    let checks = checks.into_iter().chain([(
        "HandleAsync awaits LoadAsync",
        under(&wall, &[HANDLER, "[resumed]", LOAD]),
        s["await_ns Shop.Orders.HandleAsync Shop.Inventory.LoadAsync"],
    )]);
    for (what, profile, app) in checks {
        let (p, a) = (ms(profile), app / 1e6);
        eprintln!("{runtime}: {what}: profile {p:.0} ms, app {a:.0} ms");
        assert!((p - a).abs() <= 0.15 * a, "{runtime}: {what}: profile {p:.0} ms, app {a:.0} ms");
    }
    // The work after each await (wall time, running or waiting for a CPU): reported, not asserted
    // (the split among the frames of one continuation is sampled).
    for (name, path) in &logical {
        let p = ms(under(&wall, &path[path.len() - 2..]));
        eprintln!("{runtime}: {name}: profile {p:.0} ms, app {:.0} ms", s[&format!("work_ns {name}")] / 1e6);
    }

    // Every thread's wall time says where it went: the main thread blocked in async Main's
    // `GetAwaiter().GetResult()` is walked under Main; the runtime's finalizer and tiered
    // compilation threads, which wait in native code with no managed frame to walk, are idle
    // (`[idle];[runtime wait] .NET Finalizer`), not `[thread not walkable]`. What may stay
    // unwalkable is a thread's time before its first walk: below 2% of the wall time.
    let total: f64 = wall.iter().map(|(_, n)| n).sum();
    let unwalkable = with(&wall, "[thread not walkable]");
    eprintln!("{runtime}: [thread not walkable] {} of {total} wall samples", unwalkable.abs());
    assert!(unwalkable <= 0.02 * total, "{runtime}: [thread not walkable] {unwalkable} of {total}");
    let pid = report_json(trace)["process"]["pid"].as_u64().unwrap().to_string();
    let main = folded_thread(trace, "wall", Some(&pid));
    let (main_all, main_under): (f64, f64) =
        (main.iter().map(|(_, n)| n).sum(), nested(&main, "Shop.Program.<Main>", "System.Threading.Monitor.Wait"));
    eprintln!("{runtime}: main thread {main_under} of {main_all} wall samples blocked under Main");
    assert!(main_under >= 0.5 * main_all, "{runtime}: main thread {main_under} of {main_all} blocked under Main");

    // Idle pool and timer threads' wall time is left out by default; `--show-idle` keeps it,
    // apart under `[idle]`, holding no request work.
    assert!(wall.iter().all(|(f, _)| !f.iter().any(|x| x == "[idle]")), "{runtime}");
    let shown = export(trace, &["-f", "collapsed", "-w", "wall", "--show-idle", "-o", "-"]);
    let shown = text(&shown.stdout);
    let idle: Vec<&str> = shown.lines().filter(|l| l.starts_with("[idle];")).collect();
    assert!(!idle.is_empty(), "{runtime}: no idle thread time");
    assert!(idle.iter().all(|l| !l.contains(";Shop.")), "{runtime}");
    assert!(idle.iter().any(|l| l.starts_with("[idle];[runtime wait] .NET Finalizer ")), "{runtime}: {idle:?}");
}

fn shape_on(runtime: &str) {
    let _machine = machine::shared();
    let dir = scratch(&format!("async-shape-{runtime}"));
    let trace = dir.join("shape.clrprof");
    let out = record_on(runtime, "AsyncShape", &["60", "4"], &trace, &["--async", "-r", "100"]);
    let s = sums(&out);
    check_shape(&trace, &s, runtime);
}

#[test]
fn logical_stacks_and_awaiting_time_on_net8() {
    shape_on("net8.0");
}

#[test]
fn logical_stacks_and_awaiting_time_on_net9() {
    shape_on("net9.0");
}

#[test]
fn logical_stacks_and_awaiting_time_on_net10() {
    shape_on("net10.0");
}

#[test]
fn without_async_the_stacks_are_as_sampled() {
    let _machine = machine::shared();
    let dir = scratch("async-shape-off");
    let trace = dir.join("plain.clrprof");
    let out = record("AsyncShape", &["12", "4"], &trace, &[]);
    assert_eq!(sums(&out).get("requests"), Some(&12.0));
    for w in ["cpu", "wall"] {
        let f = folded(&trace, w);
        let marked = |x: &String| ["[resumed]", "[task]", "[idle]"].contains(&x.as_str()) || x.starts_with("[await]");
        assert!(f.iter().all(|(f, _)| !f.iter().any(marked)), "{w}");
    }
}

/// ASP.NET Core + EF Core: the handlers' EF Core queries (outside the seeding at start-up) are
/// under the endpoint handler in the logical stacks.
fn web_handlers_keep_their_ef_work(runtime: &str) {
    let _machine = machine::shared();
    let dir = scratch(&format!("async-webef-{runtime}"));
    let trace = dir.join("web.clrprof");
    let out = record_on(runtime, "WebEf", &["600"], &trace, &["--async"]);
    assert!(out.status.success(), "{runtime}: {}\n{}", text(&out.stdout), text(&out.stderr));
    let cpu = folded(&trace, "cpu");
    let ef: Vec<&(Vec<String>, f64)> = cpu
        .iter()
        // Queries (compiled and run inside the handler's call); the DbContext itself is made by
        // the request delegate before the handler and disposed after it.
        .filter(|(f, _)| f.iter().any(|x| x.starts_with("Microsoft.EntityFrameworkCore.Query.")))
        .filter(|(f, _)| !f.iter().any(|x| x.starts_with("Seed.") || x.contains("Program.<Main>")))
        .collect();
    let all: f64 = ef.iter().map(|(_, n)| n).sum();
    let handled: f64 = ef.iter().filter(|(f, _)| f.iter().any(|x| x.starts_with("Handlers."))).map(|(_, n)| n).sum();
    assert!(all >= 20.0, "{runtime}: too few EF Core samples ({all})");
    assert!(handled >= 0.9 * all, "{runtime}: {handled} of {all} EF Core CPU samples under the endpoint handlers");
}

#[test]
fn web_handlers_keep_their_ef_work_on_net8() {
    web_handlers_keep_their_ef_work("net8.0");
}

#[test]
fn web_handlers_keep_their_ef_work_on_net9() {
    web_handlers_keep_their_ef_work("net9.0");
}

#[test]
fn web_handlers_keep_their_ef_work_on_net10() {
    web_handlers_keep_their_ef_work("net10.0");
}

/// `attach --async` to a running AsyncShape: the work after its awaits is under `[resumed]`, the
/// app keeps running.
#[test]
fn attach_async_gives_logical_stacks() {
    use std::process::{Command, Stdio};
    let _machine = machine::shared();
    let dir = scratch("async-attach");
    let trace = dir.join("attached.clrprof");
    let mut app = KillOnDrop(
        Command::new("dotnet")
            .arg(app_dll("AsyncShape"))
            .args(["600", "4"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    // Attach once its runtime is up (its diagnostics socket exists).
    std::thread::sleep(std::time::Duration::from_secs(3));
    let o = Command::new(clrprof_exe())
        .arg("attach")
        .arg(app.0.id().to_string())
        .arg("--agent")
        .arg(agent_path())
        .args(["--async", "-d", "4", "-o"])
        .arg(&trace)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(app.0.try_wait().unwrap().is_none(), "the app died");
    let cpu = folded(&trace, "cpu");
    let all: f64 =
        ["Shop.Orders.Compute", "Shop.Inventory.Parse", "Shop.Orders.Render"].iter().map(|n| with(&cpu, n)).sum();
    let resumed: f64 = cpu
        .iter()
        .filter(|(f, _)| {
            f.iter().any(|x| x == "Shop.Orders.Compute" || x == "Shop.Inventory.Parse" || x == "Shop.Orders.Render")
        })
        .filter(|(f, _)| f.iter().any(|x| x == "[resumed]"))
        .map(|(_, n)| n)
        .sum();
    assert!(all >= 20.0, "too few samples ({all})");
    assert!(resumed >= 0.9 * all, "{resumed} of {all} CPU samples after awaits under [resumed]");
}
