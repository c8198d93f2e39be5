//! End to end: the exact modes lose nothing when the machine is busy. The C# compiler used as a
//! library (Microsoft.CodeAnalysis.CSharp from NuGet, `apps/CompileLib`) compiles a generated source
//! while two threads of the app spin on the CPU; the trace buffers are made small
//! (`CLRPROF_BUFFER_KB`) so that the writer, competing for a CPU, falls behind within seconds rather
//! than after minutes. No record may be dropped, every call-tree record must be placed, and the
//! app's own counts of its functions must match the exact call counts.

use crate::common::*;

use std::process::{Command, Stdio};

#[test]
fn the_compiler_s_exact_counts_hold_on_a_busy_machine() {
    let _machine = machine::shared();
    let dir = scratch("compile-busy");
    let dll = app_dll("CompileLib");
    for flags in [&["--instrument"][..], &["--instrument", "--counts-only"][..]] {
        let trace = dir.join("t.clrprof");
        let mut c = Command::new(clrprof_exe());
        c.arg("record").arg("-o").arg(&trace).arg("--agent").arg(agent_path()).args(flags);
        // 3 compilations of 4 generated classes, 2 CPU hogs in the app.
        c.arg("--").arg("dotnet").arg(&dll).args(["3", "2", "4"]);
        c.env("CLRPROF_BUFFER_KB", "256").stdin(Stdio::null());
        let out = c.output().unwrap();
        assert!(out.status.success(), "{flags:?}: {}", text(&out.stderr));
        let line = text(&out.stdout);
        let field = |k: &str| -> u64 {
            let at = line.find(&format!("{k}=")).unwrap_or_else(|| panic!("{flags:?}: {k} in {line:?}"));
            line[at + k.len() + 1..].split_whitespace().next().unwrap().parse().unwrap()
        };
        let v = report_json(&trace);
        let messages = v["messages"].to_string();
        assert!(!messages.contains("dropped"), "{flags:?}: {messages}");
        assert!(!messages.contains("could not be placed"), "{flags:?}: {messages}");
        assert!(!messages.contains("not recorded"), "{flags:?}: {messages}");
        assert_eq!(calls(&v, "Program.Main"), 1, "{flags:?}");
        assert_eq!(calls(&v, "Program.Compile"), field("compilations"), "{flags:?}");
        assert_eq!(calls(&v, "Walker.VisitMethodDeclaration"), field("visits"), "{flags:?}");
        assert_eq!(calls(&v, "Program.Seen"), field("seen"), "{flags:?}");
        assert_eq!(field("visits"), 3 * 4 * 12, "{line}");
    }
    let _ = std::fs::remove_dir_all(dir);
}
