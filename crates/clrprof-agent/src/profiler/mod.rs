//! The profiler object handed to the runtime, and its state: the recorders' context
//! ([`crate::context::Context`]) and the recorders.
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
//! The other recorders live beside this module and know nothing of it: `crate::elt` (enter/leave
//! hooks), `crate::sampler` and `crate::events` (exceptions, GC, allocations, EventPipe).

mod attach;
mod callbacks;
mod functions;
mod startup;

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use clrprof_sys::ComObject;

use crate::context::Context;
use crate::os::os_tid;

use functions::Functions;

/// The profiler's state: the recorders' [`Context`] and the recorders. It derefs to its
/// context, so the profiler's methods read `s.info`, `s.writer`, `s.now()` as the recorders do.
pub(crate) struct State {
    pub(crate) cx: Context,
    started: Mutex<HashMap<(u32, usize), u64>>,
    /// The loads/JIT recorder's queues.
    functions: Functions,
    /// The sampling profiler, when `CLRPROF_SAMPLING` is on.
    pub(crate) sampler: Option<Arc<crate::sampler::Sampler>>,
    /// Enter/leave instrumentation, when enabled.
    pub(crate) instrumentation: Option<crate::elt::Instrumentation>,
    /// Call counts by IL probes (`CLRPROF_COUNT`), when enabled.
    pub(crate) counts: Option<crate::count::Counts>,
    /// `attach --count`: call counts by ReJIT with IL probes, when enabled.
    pub(crate) attach_counts: Option<crate::rejit::AttachCounts>,
    /// Runtime events (exceptions, GC, allocations): see `crate::events`.
    pub(crate) events: Arc<crate::events::Events>,
    /// Where the trace is written.
    pub(crate) trace_path: String,
    /// The in-process EventPipe session (0 when none), stopped before an attach session detaches.
    pub(crate) eventpipe_session: AtomicU64,
}

impl std::ops::Deref for State {
    type Target = Context;

    fn deref(&self) -> &Context {
        &self.cx
    }
}

impl State {
    /// Reports a compiled function (see [`Functions::function_compiled`]).
    fn function_compiled(&self, id: clrprof_sys::FunctionID, jit_ns: u64, kind: u8) {
        self.functions.function_compiled(&self.cx, self.sampler.as_deref(), id, jit_ns, kind);
    }

    /// Reports a loaded class (see [`Functions::class_loaded`]).
    fn class_loaded(&self, id: clrprof_sys::ClassID) {
        self.functions.class_loaded(&self.cx, id);
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

static CREATED: AtomicBool = AtomicBool::new(false);

/// The class factory's constructor (`DllGetClassObject`): the profiler object, or None when one
/// exists already.
pub(crate) fn make_profiler() -> Option<*mut c_void> {
    // One profiler per process: a second CreateInstance politely declines.
    if CREATED.swap(true, Ordering::AcqRel) {
        return None;
    }
    Some(ComObject::create(Profiler::new()))
}

/// After `ProfilerDetachSucceeded` (an attach session ended), the next attach loads the same
/// image (`-z nodelete`) and needs a new profiler object.
fn allow_new_profiler() {
    CREATED.store(false, Ordering::Release);
}

/// The profiler object handed to the runtime.
pub(crate) struct Profiler {
    state: OnceLock<State>,
}

impl Default for Profiler {
    fn default() -> Self {
        Self::new()
    }
}

impl Profiler {
    pub(crate) fn new() -> Profiler {
        Profiler { state: OnceLock::new() }
    }

    fn state(&self) -> Option<&State> {
        self.state.get().filter(|s| !s.is_stopped())
    }
}
