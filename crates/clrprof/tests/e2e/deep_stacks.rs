//! End to end: stacks deeper than the old 128-frame walk are sampled whole — a JavaScript
//! interpreter from NuGet (Jint) running recursive JS, and apps/Stress's recursion at an exact depth.

use crate::common::*;

/// `key=value` from the app's stdout.
fn printed(stdout: &str, key: &str) -> String {
    stdout
        .split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("{key}= not printed in {stdout:?}"))
        .to_string()
}

/// Jint runs a recursive JS `fib(25)` for 3 s of CPU: each JS call is a dozen or more managed frames
/// of the interpreter, so its deepest stacks are hundreds of frames deep. With the walk cut at 128
/// frames about a tenth of the samples lost everything above (`Main` among them); now no stack is cut
/// and `Main` holds all of the main thread's samples but those of the runtime's start-up and exit
/// and the profiler's own.
#[test]
fn a_javascript_interpreter_s_deep_recursion_is_sampled_whole() {
    let _machine = machine::shared();
    let dir = scratch("deep-jint");
    let trace = dir.join("jint.clrprof");
    let out = record("JsInterp", &["3000", "25"], &trace, &[]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "record failed: {stdout}{}", text(&out.stderr));
    assert!(stdout.contains("fib(25)=75025"), "{stdout}");
    let main = printed(&stdout, "main_tid");
    // The profiler's own time (its allocation-stack walks on this thread) is apart, under
    // `[profiler]`: it is not the program's.
    let stacks: Vec<_> =
        folded_thread(&trace, "cpu", Some(&main)).into_iter().filter(|s| s.0[0] != "[profiler]").collect();
    let total: f64 = stacks.iter().map(|s| s.1).sum();
    let cut: f64 = stacks.iter().filter(|s| s.0[0].starts_with("[stack cut at")).map(|s| s.1).sum();
    assert_eq!(cut, 0.0, "no stack is cut ({cut} of {total})");
    let under_main: f64 = stacks.iter().filter(|s| s.0.iter().any(|f| f == "JsInterp.Program.Main")).map(|s| s.1).sum();
    let share = under_main / total;
    assert!(share >= 0.95, "Main has {share:.3} of the main thread's CPU samples ({under_main} of {total})");
    // The interpreter's own entry point too.
    let run: f64 = stacks.iter().filter(|s| s.0.iter().any(|f| f == "JsInterp.Program.Run")).map(|s| s.1).sum();
    assert!(run >= total * 0.9, "Run: {run} of {total}");
    let deepest = stacks.iter().map(|s| s.0.len()).max().unwrap_or(0);
    assert!(deepest > 200, "the recursion's stacks are deeper than the old limit: {deepest} frames");
}

/// apps/Stress recursing 1,000 deep: every CPU sample and every walked wall sample through `Bottom`
/// holds exactly the 1,001 `Recurse` frames, uncut.
#[test]
fn a_recursion_one_thousand_deep_is_sampled_at_its_exact_depth() {
    let _machine = machine::shared();
    let dir = scratch("deep-1000");
    let trace = dir.join("s.clrprof");
    let out = record("Stress", &["recurse", "1000", "600"], &trace, &[]);
    let stdout = text(&out.stdout);
    assert!(out.status.success() && stdout.contains("stress recurse ok"), "{stdout}{}", text(&out.stderr));
    for weight in ["cpu", "wall"] {
        let stacks = folded_thread(&trace, weight, Some("deep"));
        let bottom: Vec<&(Vec<String>, f64)> =
            stacks.iter().filter(|s| s.0.iter().any(|f| f == "StressApp.Deep.Bottom")).collect();
        assert!(!bottom.is_empty(), "{weight}: Bottom sampled");
        for (stack, n) in bottom {
            let recurse = stack.iter().filter(|f| *f == "StressApp.Deep.Recurse").count();
            assert!(!stack[0].starts_with("[stack cut at"), "{weight}: cut ({n}): {}", stack.join(";"));
            assert_eq!(recurse, 1001, "{weight} ({n}): {}", stack.join(";"));
        }
    }
}
