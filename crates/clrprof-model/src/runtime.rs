//! Naming the runtime's own time. A sampled stack whose leaf frames are native code of the
//! runtime (libcoreclr, libclrjit, …) without symbols, or code in no mapping at all (the stubs the
//! runtime generates), says nothing by itself. The agent records what the thread was doing in the
//! runtime when it was sampled (`SampleStack.activity`, see `clrprof_trace::runtime_activity`);
//! such a run of native frames is replaced by one synthetic frame under its managed caller:
//! `[JIT] Namespace.Type.Method`, `[type load] Namespace.Type`, `[assembly load] Name`, `[GC]`,
//! `[exception dispatch]`, `[ReadyToRun] Namespace.Type.Method` (its precompiled code prepared
//! for the first call), and without a recorded activity `[stub]` (only code outside every
//! mapped file) or `[runtime]`. Named native frames of the run (symbols found) stay, below it.

use std::collections::HashMap;

use clrprof_trace::runtime_activity as ra;

use crate::process::{Assembly, Function, Module};

/// Module given to the synthetic frames (the modules view counts their hits under it).
pub const RUNTIME_MODULE: &str = "[runtime]";
/// Label of runtime code when no activity was recorded.
pub const RUNTIME: &str = "[runtime]";
/// Label of code in no mapped file and no managed code range, when no activity was recorded.
pub const STUB: &str = "[stub]";
/// Label of the JIT's code when no compilation was recorded (older traces).
pub const JIT: &str = "[JIT]";
/// The JIT's library.
pub const JIT_LIBRARY: &str = "libclrjit.so";
/// Label (and module) of the profiler's own time: samples with a frame in the agent's library.
pub const PROFILER: &str = "[profiler]";
/// The agent's library (the profiler itself).
pub const PROFILER_LIBRARY: &str = "libclrprof_agent.so";

/// True for the profiler's own library (by file name).
pub fn is_profiler_library(module: &str) -> bool {
    module == PROFILER_LIBRARY
}

/// Native libraries of the runtime itself.
const RUNTIME_LIBRARIES: &[&str] = &[
    "libcoreclr.so",
    "libclrjit.so",
    "libclrgc.so",
    "libclrgcexp.so",
    "libcoreclrtraceptprovider.so",
    "libmscordaccore.so",
    "libmscordbi.so",
];

/// True for a native module of the runtime itself (by file name).
pub fn is_runtime_library(module: &str) -> bool {
    RUNTIME_LIBRARIES.contains(&module)
}

/// What one resolved frame of a sampled stack is, for [`attribute`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameClass {
    Managed,
    /// Native code with a symbol; `runtime` when in a runtime library.
    Named {
        runtime: bool,
    },
    /// Native code of a mapped file without a symbol.
    Unnamed {
        runtime: bool,
    },
    /// An IP in no mapping and no managed code (runtime-generated stubs).
    Unmapped,
    /// A frame without an IP (the native run of a runtime stack walk): nothing known.
    NoIp,
}

impl FrameClass {
    fn unnamed(self) -> bool {
        matches!(self, FrameClass::Unnamed { .. } | FrameClass::Unmapped | FrameClass::NoIp)
    }
}

/// Names of the runtime's subjects, by runtime id, for the labels.
pub struct ActivityNames {
    functions: HashMap<u64, String>,
    /// Type loads by `TypeLoadStartID`.
    type_loads: HashMap<u32, String>,
    assemblies: HashMap<u64, String>,
    /// Module id → (assembly id, file name).
    modules: HashMap<u64, (u64, String)>,
}

impl ActivityNames {
    /// The names of a profile's tables (`functions`, `assemblies`, `modules`) and of the sampled
    /// type loads.
    pub fn of(
        functions: &[Function],
        assemblies: &[Assembly],
        modules: &[Module],
        type_loads: &HashMap<u32, String>,
    ) -> ActivityNames {
        let mut function_names = HashMap::new();
        for f in functions {
            function_names.entry(f.id).or_insert_with(|| f.name.clone());
        }
        let mut assembly_names = HashMap::new();
        for a in assemblies {
            assembly_names.entry(a.id).or_insert_with(|| a.name.clone());
        }
        let mut module_names = HashMap::new();
        for m in modules {
            module_names.entry(m.id).or_insert_with(|| (m.assembly, m.file_name().to_string()));
        }
        ActivityNames {
            functions: function_names,
            type_loads: type_loads.clone(),
            assemblies: assembly_names,
            modules: module_names,
        }
    }

    /// The label of an activity word (None for 0 or an unknown kind).
    pub fn label(&self, activity: u64) -> Option<String> {
        let (kind, id) = ra::unpack(activity);
        let named = |prefix: &str, name: Option<&String>| match name {
            Some(n) if !n.is_empty() => format!("{prefix} {n}"),
            _ => prefix.to_string(),
        };
        Some(match kind {
            ra::JIT => named("[JIT]", self.functions.get(&id)),
            ra::TYPE_LOAD => {
                let name = u32::try_from(id).ok().and_then(|i| self.type_loads.get(&i)).map(|n| tidy_type_name(n));
                named("[type load]", name.as_ref())
            }
            ra::ASSEMBLY_LOAD => named("[assembly load]", self.assemblies.get(&id)),
            ra::MODULE_LOAD => match self.modules.get(&id) {
                Some((a, file)) => match self.assemblies.get(a) {
                    Some(n) if !n.is_empty() => format!("[assembly load] {n}"),
                    _ => format!("[assembly load] {file}"),
                },
                None => "[assembly load]".to_string(),
            },
            ra::GC => "[GC]".to_string(),
            ra::EXCEPTION => "[exception dispatch]".to_string(),
            ra::READY_TO_RUN => named("[ReadyToRun]", self.functions.get(&id)),
            _ => return None,
        })
    }
}

/// Rewrites one sampled stack (leaf first, `classes[i]` describing `frames[i]`): when its leaf
/// frames are a run of non-managed frames in the runtime (or the thread was doing recorded
/// runtime work), their unnamed frames are replaced by one frame `label(activity)` placed under
/// the managed caller (or, on a thread without managed frames, in place of its unnamed leaf
/// frames). Returns the
/// positions (into `frames`) of the frames kept, leaf first, with `None` where the synthetic
/// frame goes; `None` as a whole when the stack stays as it is.
pub fn attribute(classes: &[FrameClass], has_activity: bool) -> Option<Vec<Option<usize>>> {
    let run = classes.iter().take_while(|c| **c != FrameClass::Managed).count();
    if run == 0 {
        return None;
    }
    let head = &classes[..run];
    let in_runtime = head.iter().any(|c| {
        matches!(c, FrameClass::Named { runtime: true } | FrameClass::Unnamed { runtime: true } | FrameClass::Unmapped)
    });
    if !has_activity && !in_runtime {
        // Native code of the app or the system under a managed caller (a P/Invoke): left as is.
        return None;
    }
    if !head.iter().any(|c| c.unnamed()) && !has_activity {
        // Fully named runtime frames need no label.
        return None;
    }
    let mut out = Vec::with_capacity(classes.len() + 1);
    if run < classes.len() {
        out.extend((0..run).filter(|&i| !classes[i].unnamed()).map(Some));
        out.push(None);
        out.extend((run..classes.len()).map(Some));
    } else {
        // No managed frame: only the unnamed runtime frames at the leaf are replaced (a named
        // leaf keeps its time, and the thread's native roots stay).
        let lead = classes
            .iter()
            .take_while(|c| {
                matches!(c, FrameClass::Unnamed { runtime: true } | FrameClass::Unmapped | FrameClass::NoIp)
            })
            .count();
        if lead == 0 {
            return None;
        }
        out.push(None);
        out.extend((lead..classes.len()).map(Some));
    }
    Some(out)
}

/// A type name as the runtime's events write it (`Dictionary`2<A,B>`) in the profile's style
/// (`Dictionary<A, B>`): arity markers dropped, a space after each comma.
pub fn tidy_type_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    let mut chars = name.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '`' if chars.peek().is_some_and(|d| d.is_ascii_digit()) => {
                while chars.peek().is_some_and(|d| d.is_ascii_digit()) {
                    chars.next();
                }
            }
            ',' => {
                out.push_str(", ");
                while chars.peek() == Some(&' ') {
                    chars.next();
                }
            }
            c => out.push(c),
        }
    }
    out
}

/// The label of a rewritten run without a recorded activity (`jit`: the run has frames in the
/// JIT's library, so the JIT was compiling something).
pub fn fallback_label(classes: &[FrameClass], jit: bool) -> &'static str {
    if jit {
        return JIT;
    }
    let run = classes.iter().take_while(|c| **c != FrameClass::Managed);
    let mut only_unmapped = true;
    for c in run {
        match c {
            FrameClass::Unmapped | FrameClass::NoIp => {}
            _ => only_unmapped = false,
        }
    }
    if only_unmapped {
        STUB
    } else {
        RUNTIME
    }
}

#[cfg(test)]
mod tests {
    use super::FrameClass::*;
    use super::*;

    #[test]
    fn an_unnamed_runtime_run_becomes_one_frame_under_its_managed_caller() {
        let c = [Unnamed { runtime: true }, Unnamed { runtime: false }, Unnamed { runtime: true }, Managed, Managed];
        assert_eq!(attribute(&c, true), Some(vec![None, Some(3), Some(4)]));
        assert_eq!(attribute(&c, false), Some(vec![None, Some(3), Some(4)]));
        assert_eq!(fallback_label(&c, false), RUNTIME);
        assert_eq!(fallback_label(&c, true), JIT);
    }

    #[test]
    fn named_frames_of_the_run_stay_below_the_label() {
        let c = [Named { runtime: true }, Unnamed { runtime: true }, Named { runtime: true }, Managed];
        assert_eq!(attribute(&c, true), Some(vec![Some(0), Some(2), None, Some(3)]));
        // Fully named runtime frames without an activity stay as they are.
        assert_eq!(attribute(&[Named { runtime: true }, Managed], false), None);
        assert_eq!(attribute(&[Named { runtime: true }, Managed], true), Some(vec![Some(0), None, Some(1)]));
    }

    #[test]
    fn stubs_app_native_code_and_managed_leaves() {
        assert_eq!(attribute(&[Unmapped, Managed], false), Some(vec![None, Some(1)]));
        assert_eq!(fallback_label(&[Unmapped, Managed], false), STUB);
        // A P/Invoke into the C library, nothing recorded: unchanged.
        assert_eq!(attribute(&[Unnamed { runtime: false }, Managed], false), None);
        // A walk's native run (no IPs) without an activity: unchanged.
        assert_eq!(attribute(&[NoIp, Managed], false), None);
        assert_eq!(attribute(&[Managed, Unnamed { runtime: true }], true), None);
    }

    #[test]
    fn a_thread_without_managed_frames_gets_the_label_as_its_leaf() {
        let c = [Unnamed { runtime: true }, Named { runtime: false }, Unnamed { runtime: false }];
        assert_eq!(attribute(&c, true), Some(vec![None, Some(1), Some(2)]));
        // The host's unnamed frames under the runtime stay.
        let c = [Unnamed { runtime: true }, Unnamed { runtime: false }, Unnamed { runtime: false }];
        assert_eq!(attribute(&c, false), Some(vec![None, Some(1), Some(2)]));
        // A named leaf on such a thread keeps its time.
        assert_eq!(attribute(&[Named { runtime: false }, Unmapped], false), None);
    }

    #[test]
    fn activity_labels() {
        let functions = [Function { id: 5, name: "App.Big.Generated".into(), ..Default::default() }];
        let assemblies = [Assembly { id: 7, name: "Plugin".into(), ..Default::default() }];
        let modules = [Module { id: 8, assembly: 7, path: "/x/Plugin.dll".into(), ..Default::default() }];
        let n = ActivityNames::of(&functions, &assemblies, &modules, &HashMap::from([(6, "App.Lazy".to_string())]));
        assert_eq!(n.label(ra::pack(ra::JIT, 5)).as_deref(), Some("[JIT] App.Big.Generated"));
        assert_eq!(n.label(ra::pack(ra::JIT, 99)).as_deref(), Some("[JIT]"));
        assert_eq!(n.label(ra::pack(ra::TYPE_LOAD, 6)).as_deref(), Some("[type load] App.Lazy"));
        assert_eq!(n.label(ra::pack(ra::ASSEMBLY_LOAD, 7)).as_deref(), Some("[assembly load] Plugin"));
        assert_eq!(n.label(ra::pack(ra::MODULE_LOAD, 8)).as_deref(), Some("[assembly load] Plugin"));
        assert_eq!(n.label(ra::pack(ra::GC, 0)).as_deref(), Some("[GC]"));
        assert_eq!(n.label(ra::pack(ra::EXCEPTION, 0)).as_deref(), Some("[exception dispatch]"));
        assert_eq!(n.label(0), None);
        let n = ActivityNames::of(
            &functions,
            &assemblies,
            &modules,
            &HashMap::from([(9, "System.Collections.Generic.Dictionary`2<App.S1,App.S2>".into())]),
        );
        assert_eq!(
            n.label(ra::pack(ra::TYPE_LOAD, 9)).as_deref(),
            Some("[type load] System.Collections.Generic.Dictionary<App.S1, App.S2>")
        );
        assert_eq!(tidy_type_name("A`1<B`2<C,D>>[]"), "A<B<C, D>>[]");
    }
}
