//! The profiler object handed to the runtime, and the state every recorder shares.
//!
//! - [`startup`]: `Initialize` (configuration, event masks, the trace writer, the recorders) and
//!   `Shutdown`.
//! - [`callbacks`]: the `ICorProfilerCallback` methods, grouped by what they record. Each is a safe
//!   `&self` method; the COM entry points that call them are `catch_unwind` shims in
//!   `clrprof_sys::callback`.
//! - [`attach`]: `clrprof attach` sessions: catch-up, the control thread, detach.
//! - [`functions`]: the loads/JIT recorder's names and code of functions and classes (the General
//!   Code Profiler's tables), resolved off the app's threads.
//!
//! The other recorders live beside this module: `crate::elt` (enter/leave hooks), `crate::sampler`
//! and `crate::events` (exceptions, GC, allocations, EventPipe).

mod attach;
mod callbacks;
mod functions;
mod startup;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use clrprof_sys::info::ProfilerInfo;
use clrprof_sys::{FunctionID, ModuleID};
use clrprof_trace::Record;

use crate::config::Config;
use crate::names::{FunctionNames, Names};
pub use crate::os::os_tid;
use crate::writer::Writer;

use functions::Deferred;
pub use functions::PendingCode;

pub struct State {
    pub info: ProfilerInfo,
    pub config: Config,
    pub writer: Arc<Writer>,
    pub names: Names,
    start: Instant,
    started: Mutex<HashMap<(u32, usize), u64>>,
    functions: Mutex<HashMap<FunctionID, Arc<FunctionNames>>>,
    pending_code: Arc<PendingCode>,
    /// Functions and classes reported by the runtime whose names are resolved off the app's
    /// threads, by the writer thread before each flush. Only non-collectible modules' ids are
    /// queued: those never die.
    deferred: Mutex<Vec<Deferred>>,
    /// Whether a module is collectible (its ids die at unload), by module.
    collectible: Mutex<HashMap<ModuleID, bool>>,
    stopped: AtomicBool,
    /// The sampling profiler, when `CLRPROF_SAMPLING` is on.
    pub sampler: Option<Arc<crate::sampler::Sampler>>,
    /// Enter/leave instrumentation, when enabled.
    pub instrumentation: Option<crate::elt::Instrumentation>,
    /// Runtime events (exceptions, GC, allocations): see `crate::events`.
    pub events: Arc<crate::events::Events>,
    /// Where the trace is written.
    pub trace_path: String,
    /// The in-process EventPipe session (0 when none), stopped before an attach session detaches.
    pub eventpipe_session: AtomicU64,
}

impl State {
    pub fn now(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// `Shutdown` began: records emitted from now on are not written.
    pub fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Relaxed)
    }

    pub fn emit(&self, r: impl Into<Record>) {
        if !self.stopped.load(Ordering::Relaxed) {
            self.writer.emit(&r.into());
        }
    }

    fn mark_start(&self, key: usize) {
        let ts = self.now();
        if let Ok(mut m) = self.started.lock() {
            m.insert((os_tid(), key), ts);
        }
    }

    /// Nanoseconds since the matching `mark_start` on this thread (0 when unknown).
    fn since_start(&self, key: usize) -> u64 {
        let now = self.now();
        self.started
            .lock()
            .ok()
            .and_then(|mut m| m.remove(&(os_tid(), key)))
            .map(|t| now.saturating_sub(t))
            .unwrap_or(0)
    }
}

/// The profiler object handed to the runtime.
pub struct Profiler {
    state: OnceLock<State>,
}

impl Default for Profiler {
    fn default() -> Self {
        Self::new()
    }
}

impl Profiler {
    pub fn new() -> Profiler {
        Profiler { state: OnceLock::new() }
    }

    fn state(&self) -> Option<&State> {
        self.state.get().filter(|s| !s.stopped.load(Ordering::Relaxed))
    }
}
