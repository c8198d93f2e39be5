//! The context every recorder works in: the runtime's info interface, the configuration, the
//! trace writer, name lookup, the clock of the run and whether it stopped. It sits at the bottom
//! of the agent: recorders (`crate::elt`, `crate::events`, `crate::sampler`) take a `&Context`
//! and never the profiler's state (`crate::profiler::State`), which holds the recorders.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use clrprof_sys::info::ProfilerInfo;
use clrprof_sys::FunctionID;
use clrprof_trace::Record;

use crate::config::Config;
use crate::names::{FunctionNames, Names};
use crate::writer::Writer;

/// How dynamic methods' names start (`names::dynamic_name`).
const DYNAMIC_PREFIX: &str = "[dynamic] ";

/// What the recorders share: see the module documentation.
pub(crate) struct Context {
    pub(crate) info: ProfilerInfo,
    pub(crate) config: Config,
    pub(crate) writer: Arc<Writer>,
    pub(crate) names: Names,
    /// Collection triggers' observations (`CLRPROF_TRIGGER`).
    pub(crate) triggers: crate::triggers::Triggers,
    start: Instant,
    stopped: AtomicBool,
    /// Names of functions, resolved once (see [`Context::function_names`]).
    functions: Mutex<HashMap<FunctionID, Arc<FunctionNames>>>,
}

impl Context {
    /// `start` is the run's time origin (trace timestamps are nanoseconds since it).
    pub(crate) fn new(
        info: ProfilerInfo,
        config: Config,
        writer: Arc<Writer>,
        names: Names,
        start: Instant,
    ) -> Context {
        Context {
            info,
            triggers: crate::triggers::Triggers::new(&config.triggers),
            config,
            writer,
            names,
            start,
            stopped: AtomicBool::new(false),
            functions: Mutex::new(HashMap::new()),
        }
    }

    /// Nanoseconds since the run started.
    pub(crate) fn now(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// `Shutdown` began: records emitted from now on are not written.
    pub(crate) fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Relaxed)
    }

    /// Marks the run stopped (`Shutdown`, or the end of an attach session).
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
    }

    pub(crate) fn emit(&self, r: impl Into<Record>) {
        if !self.stopped.load(Ordering::Relaxed) {
            self.writer.emit(&r.into());
        }
    }

    /// Names of a function, resolved once.
    pub(crate) fn function_names(&self, id: FunctionID) -> Arc<FunctionNames> {
        if let Some(f) = self.functions.lock().ok().and_then(|m| m.get(&id).cloned()) {
            return f;
        }
        let f = Arc::new(self.names.function(id));
        // A dynamic method's id can be reused by another one once it is collected: not cached
        // (its names are looked up once anyway, when it is compiled).
        if f.name.starts_with(DYNAMIC_PREFIX) {
            return f;
        }
        if let Ok(mut m) = self.functions.lock() {
            m.insert(id, Arc::clone(&f));
        }
        f
    }
}
