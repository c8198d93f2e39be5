//! The rows of the General Code Profiler's tables: the process and what ran in it (threads, app
//! domains, assemblies, modules, classes, functions). Plain data that the profile holds and the
//! modules below it read.

use clrprof_trace::code_kind;

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Process {
    pub pid: u32,
    pub command_line: String,
    pub runtime_version: String,
    pub runtime_major: u16,
    pub info_version: u32,
    pub agent_version: String,
    pub config: String,
    pub event_mask_low: u32,
    pub event_mask_high: u32,
    /// Wall-clock start, ns since the Unix epoch.
    pub start_unix_ns: u64,
    /// Exit code from `clrprof record`, when it saw the exit.
    pub exit_code: Option<i32>,
    /// Terminating signal, when the process was killed.
    pub signal: Option<i32>,
    /// From the agent's start to the exit (or to the last record when the exit was not seen).
    pub duration_ns: u64,
    /// True when the agent's `Shutdown` ran (no crash, no kill).
    pub clean_shutdown: bool,
    pub records_dropped: u64,
    /// The machine's host name, when the agent recorded it.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub host: String,
    /// `CLRPROF_SERVICE`, when set.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub service: String,
    /// `CLRPROF_LABELS`, in order: the user's own labels.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<(String, String)>,
}

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Thread {
    /// The runtime's ThreadID.
    pub id: u64,
    pub os_tid: Option<u32>,
    /// Last name given (empty when never named).
    pub name: String,
    /// Every name the thread had, with the time it was given.
    pub names: Vec<(u64, String)>,
    pub created_ns: Option<u64>,
    pub destroyed_ns: Option<u64>,
}

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct AppDomain {
    pub id: u64,
    pub name: String,
    pub created_ns: u64,
    pub unloaded_ns: Option<u64>,
}

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Assembly {
    pub id: u64,
    pub name: String,
    pub appdomain: u64,
    pub module: u64,
    pub loaded_ns: u64,
    pub load_ns: u64,
    pub unloaded_ns: Option<u64>,
}

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Module {
    pub id: u64,
    pub path: String,
    pub assembly: u64,
    pub base_address: u64,
    pub loaded_ns: u64,
    pub load_ns: u64,
    pub unloaded_ns: Option<u64>,
}

impl Module {
    /// File name of the module (`System.Private.CoreLib.dll`).
    pub fn file_name(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or(&self.path)
    }
}

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Class {
    pub id: u64,
    pub name: String,
    pub token: u32,
    pub module: u64,
    pub loaded_ns: u64,
    pub unloaded_ns: Option<u64>,
}

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Function {
    pub id: u64,
    pub name: String,
    pub class_name: String,
    pub signature: String,
    pub token: u32,
    pub class: u64,
    pub module: u64,
    /// Latest code version's start and size.
    pub code_start: u64,
    pub code_size: u64,
    /// Sum of JIT time over all compilations of this function.
    pub jit_ns: u64,
    /// How the first code version came to be (see `clrprof_trace::code_kind`).
    pub kind: u8,
    /// Number of code versions (tiered compilation recompiles hot methods).
    pub compilations: u32,
    pub first_compiled_ns: u64,
    /// Every code version's (start, size).
    pub code: Vec<(u64, u64)>,
    pub unloaded_ns: Option<u64>,
}

impl Function {
    pub fn kind_name(&self) -> &'static str {
        match self.kind {
            code_kind::JIT => "jit",
            code_kind::PRECOMPILED => "precompiled",
            code_kind::DYNAMIC => "dynamic",
            code_kind::EXISTING => "existing",
            _ => "other",
        }
    }
}
