//! The profiler object: configuration, the trace writer, and the loads/JIT/threads recorder
//! (the General Code Profiler's tables). Every method is a safe `&self` callback.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use clrprof_sys::callback::{CallbackError, CallbackResult, OutBool, ProfilerCallback, RawPtr};
use clrprof_sys::info::{utf16_from_raw, ProfilerInfo};
use clrprof_sys::{
    monitor, AppDomainID, AssemblyID, ClassID, FunctionID, ModuleID, ObjectID, ThreadID, BOOL, HRESULT, ULONG, WCHAR,
};
use clrprof_trace::*;

use crate::config::Config;
use crate::events::{alloc, eventpipe, exceptions, gc};
use crate::names::{FunctionNames, Names};
use crate::writer::{Sink, Writer};
use crate::{log_error, log_info, log_warn};

/// The calling thread's kernel tid (cached per thread).
pub fn os_tid() -> u32 {
    thread_local! { static TID: u32 = unsafe_gettid(); }
    TID.try_with(|t| *t).unwrap_or_else(|_| unsafe_gettid())
}

fn unsafe_gettid() -> u32 {
    // Safety: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

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
}

/// A runtime notification whose names are looked up later (see `State::resolve_deferred`).
enum Deferred {
    Function { id: FunctionID, ts: u64, os_tid: u32, jit_ns: u64, kind: u8 },
    Class { id: ClassID, ts: u64 },
}

/// Functions whose native code was not yet published when they were reported (precompiled code
/// found by `JITCachedFunctionSearchFinished`); the writer thread looks their code up before each
/// flush and emits them.
#[derive(Default)]
pub struct PendingCode {
    items: Mutex<Vec<(FunctionCompiled, u32)>>,
}

/// Flushes (about 1 s at the default interval) after which a function is reported without code.
const PENDING_CODE_TRIES: u32 = 20;

impl PendingCode {
    fn resolve(&self, info: &ProfilerInfo, writer: &Writer, give_up: bool) {
        let Ok(mut items) = self.items.lock() else { return };
        items.retain_mut(|(rec, tries)| {
            *tries += 1;
            match info.get_code_info2(rec.id as usize) {
                Ok(code) if !code.is_empty() => {
                    rec.code_start = code[0].start_address as u64;
                    rec.code_size = code.iter().map(|c| c.size as u64).sum();
                    writer.emit(&rec.clone().into());
                    false
                }
                _ if give_up || *tries >= PENDING_CODE_TRIES => {
                    writer.emit(&rec.clone().into());
                    false
                }
                _ => true,
            }
        });
    }
}

impl State {
    pub fn now(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
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

    /// Names of a function, resolved once.
    pub fn function_names(&self, id: FunctionID) -> Arc<FunctionNames> {
        if let Some(f) = self.functions.lock().ok().and_then(|m| m.get(&id).cloned()) {
            return f;
        }
        let f = Arc::new(self.names.function(id));
        if let Ok(mut m) = self.functions.lock() {
            m.insert(id, Arc::clone(&f));
        }
        f
    }

    /// True when `module` can unload (a collectible assembly context): ids of its functions and
    /// classes die then, so they are never looked up later from another thread.
    pub fn is_collectible(&self, module: ModuleID) -> bool {
        if module == 0 {
            return false;
        }
        if let Some(c) = self.collectible.lock().ok().and_then(|m| m.get(&module).copied()) {
            return c;
        }
        // COR_PRF_MODULE_COLLECTIBLE; if the runtime cannot say, be safe.
        let c = self.info.get_module_flags(module).map(|f| f & 0x8 != 0).unwrap_or(true);
        if let Ok(mut m) = self.collectible.lock() {
            m.insert(module, c);
        }
        c
    }

    /// True when `id` belongs to a collectible module (or its module cannot be told).
    fn function_is_collectible(&self, id: FunctionID) -> bool {
        match self.info.get_function_info(id) {
            Ok((_, module, _)) => self.is_collectible(module),
            Err(_) => true,
        }
    }

    /// Reports a compiled function. Its names, code range and IL size are looked up later on the
    /// writer thread — at once when its module is collectible, while its id is sure to be valid.
    /// The sampler learns of the new code too (one collectible check serves both).
    fn function_compiled(&self, id: FunctionID, jit_ns: u64, kind: u8) {
        let (ts, tid) = (self.now(), os_tid());
        let collectible = self.function_is_collectible(id);
        if let Some(sm) = &self.sampler {
            sm.code_compiled(id, collectible);
        }
        if collectible {
            self.emit_function(&self.writer, id, ts, tid, jit_ns, kind, false);
            return;
        }
        let d = Deferred::Function { id, ts, os_tid: tid, jit_ns, kind };
        if let Ok(mut q) = self.deferred.lock() {
            q.push(d);
        }
    }

    /// Resolves and emits everything queued so far (writer thread, or an unloading callback).
    pub fn resolve_deferred(&self, w: &Writer) {
        let items = match self.deferred.lock() {
            Ok(mut q) => std::mem::take(&mut *q),
            Err(_) => return,
        };
        for d in items {
            match d {
                Deferred::Function { id, ts, os_tid, jit_ns, kind } => {
                    self.emit_function(w, id, ts, os_tid, jit_ns, kind, !w.is_stopping())
                }
                Deferred::Class { id, ts } => self.emit_class(w, id, ts),
            }
        }
    }

    fn emit_class(&self, w: &Writer, id: ClassID, ts: u64) {
        let (module, token) = match self.info.get_class_id_info2(id) {
            Ok((m, t, _, _)) => (m as u64, t),
            Err(_) => (0, 0),
        };
        let name = self.names.class_name(id).to_string();
        w.emit(&ClassLoaded { ts, id: id as u64, module, token, name }.into());
    }

    /// `retry`: when the code is not published yet, look it up again on later flushes (never for
    /// collectible code, whose id may die).
    #[allow(clippy::too_many_arguments)]
    fn emit_function(&self, w: &Writer, id: FunctionID, ts: u64, os_tid: u32, jit_ns: u64, kind: u8, retry: bool) {
        let f = self.function_names(id);
        let code = self.info.get_code_info2(id).unwrap_or_default();
        let code_start = code.first().map(|c| c.start_address as u64).unwrap_or(0);
        let code_size = code.iter().map(|c| c.size as u64).sum();
        let rec = FunctionCompiled {
            ts,
            id: id as u64,
            os_tid,
            class: f.class as u64,
            module: f.module as u64,
            token: f.token,
            name: f.name.clone(),
            class_name: f.class_name.clone(),
            signature: f.signature.clone(),
            code_start,
            code_size,
            jit_ns,
            kind,
            il_size: self.info.il_code_size(f.module, f.token).ok().flatten().unwrap_or(0),
        };
        // Precompiled code may not be published yet: retry on later flushes.
        if code.is_empty() && retry {
            if let Ok(mut p) = self.pending_code.items.lock() {
                p.push((rec, 0));
            }
        } else {
            w.emit(&rec.into());
        }
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

fn open_output(path: &str) -> io::Result<(std::fs::File, String)> {
    let open = |p: &str| std::fs::OpenOptions::new().write(true).create_new(true).open(p);
    match open(path) {
        Ok(f) => Ok((f, path.to_string())),
        // Another process of the same launch (a child of the profiled app) got there first:
        // keep both traces.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            let alt = format!("{path}.{}", std::process::id());
            open(&alt).map(|f| (f, alt))
        }
        Err(e) => Err(e),
    }
}

fn command_line() -> String {
    std::fs::read("/proc/self/cmdline")
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

fn unix_now_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}

impl Profiler {
    fn start(&self, unknown: RawPtr, attach: bool) -> CallbackResult {
        let start = Instant::now();
        let start_unix = unix_now_ns();
        let (config, problems) = Config::from_lookup(|k| std::env::var(k).ok());
        if let Some(l) = &config.log {
            crate::log::init(l);
        }
        std::panic::set_hook(Box::new(|p| crate::log::write("panic", format_args!("{p}"))));
        log_info!(
            "clrprof agent {} loading ({})",
            env!("CARGO_PKG_VERSION"),
            if attach { "attach" } else { "startup" }
        );
        for p in &problems {
            log_warn!("{p}");
        }
        // Safety: `unknown` is the runtime's IUnknown passed to Initialize.
        let info = unsafe { ProfilerInfo::from_unknown(unknown) }
            .ok_or_else(|| CallbackError("the runtime offered no ICorProfilerInfo".into()))?;
        let rt = info.get_runtime_information().unwrap_or_default();
        log_info!(
            "runtime {} (type {}, {}.{}.{}.{}), ICorProfilerInfo{}",
            rt.version_string,
            rt.runtime_type,
            rt.major,
            rt.minor,
            rt.build,
            rt.qfe,
            info.version()
        );

        let mut low = monitor::MODULE_LOADS
            | monitor::ASSEMBLY_LOADS
            | monitor::APPDOMAIN_LOADS
            | monitor::JIT_COMPILATION
            | monitor::THREADS
            | monitor::CACHE_SEARCHES;
        if config.classes {
            low |= monitor::CLASS_LOADS;
        }
        if config.sampling {
            low |= monitor::ENABLE_STACK_SNAPSHOT;
        }
        let mut high = 0;
        let (elt_low, elt_high) = crate::elt::Instrumentation::mask(&config.instrument);
        low |= elt_low;
        high |= elt_high;
        let (ev_low, ev_high) = crate::events::mask(&config, info.version());
        low |= ev_low;
        high |= ev_high;
        info.set_event_mask2(low, high)?;
        let (glow, ghigh) = info.get_event_mask2().unwrap_or((low, high));
        log_info!("event mask requested 0x{low:08x}/0x{high:08x}, granted 0x{glow:08x}/0x{ghigh:08x}");

        let path = config.output_path(std::process::id());
        let (file, path) = open_output(&path).map_err(|e| {
            log_error!("cannot create trace file {path}: {e}; profiler not loaded");
            CallbackError(format!("cannot create {path}: {e}"))
        })?;
        log_info!("writing trace to {path}");
        let writer = Arc::new(Writer::new(Sink::File(file), Duration::from_millis(config.flush_ms))?);
        let mut first: Vec<Record> = vec![ProcessStart {
            pid: std::process::id(),
            start_unix_ns: start_unix,
            command_line: command_line(),
            runtime_version: format!("{}.{}.{}", rt.major, rt.minor, rt.build),
            runtime_major: rt.major,
            info_version: info.version(),
            event_mask_low: glow,
            event_mask_high: ghigh,
            agent_version: env!("CARGO_PKG_VERSION").into(),
            config: config.describe(),
        }
        .into()];
        for p in &problems {
            first.push(Message { ts: 0, level: 1, text: p.to_string() }.into());
        }
        let instrumentation = if config.instrument.enabled {
            let (i, rec) =
                crate::elt::Instrumentation::new(config.instrument.clone(), start.elapsed().as_nanos() as u64);
            first.push(rec.into());
            Some(i)
        } else {
            None
        };
        writer.write_now(&first);
        let pending_code = Arc::new(PendingCode::default());
        let pc = Arc::clone(&pending_code);
        writer.add_tick(Box::new(move |w| pc.resolve(&info, w, w.is_stopping())));
        let events = Arc::new(crate::events::Events::default());
        let ev = Arc::clone(&events);
        let alloc_names = Names::new(info);
        writer.add_tick(Box::new(move |w| ev.alloc.drain(&alloc_names, w, start.elapsed().as_nanos() as u64)));
        writer.start()?;
        let sampler = if config.sampling {
            let s = crate::sampler::Sampler::new(info, Arc::clone(&writer), start, config.sample_rate);
            match s.start() {
                Ok(()) => Some(s),
                Err(e) => {
                    log_error!("sampler not started: {e}");
                    None
                }
            }
        } else {
            None
        };
        let state = State {
            names: Names::new(info),
            info,
            config,
            writer,
            start,
            started: Mutex::new(HashMap::new()),
            functions: Mutex::new(HashMap::new()),
            pending_code,
            deferred: Mutex::new(Vec::new()),
            collectible: Mutex::new(HashMap::new()),
            stopped: AtomicBool::new(false),
            sampler,
            instrumentation,
            events,
        };
        self.state.set(state).map_err(|_| CallbackError("initialized twice".into()))?;
        if let Some(s) = self.state.get() {
            // Safety: the profiler object is never freed (see `ComObject::create`), so its state
            // lives for the rest of the process.
            let st: &'static State = unsafe { &*(s as *const State) };
            st.writer.add_tick(Box::new(move |w| st.resolve_deferred(w)));
            if st.instrumentation.is_some() {
                crate::elt::Instrumentation::install(&st.info, st)?;
                st.writer.add_tick(Box::new(move |w| {
                    if let Some(i) = &st.instrumentation {
                        i.publish(w, st.now());
                    }
                }));
                log_info!("enter/leave hooks installed");
            }
            if st.config.exceptions && !st.config.every_exception() {
                st.writer.add_tick(Box::new(move |w| st.events.limiter.tick(st, w)));
            }
            crate::events::eventpipe::start(s, rt.major);
        }
        log_info!("initialized in {} µs", start.elapsed().as_micros());
        Ok(())
    }
}

impl ProfilerCallback for Profiler {
    fn initialize(&self, info: RawPtr) -> CallbackResult {
        self.start(info, false)
    }

    fn initialize_for_attach(&self, info: RawPtr, _data: RawPtr, _len: u32) -> CallbackResult {
        self.start(info, true)
    }

    fn shutdown(&self) -> CallbackResult {
        let Some(s) = self.state() else { return Ok(()) };
        // The sampler stops first: it calls the runtime and writes through the writer.
        if let Some(sm) = &s.sampler {
            sm.stop();
        }
        let ts = s.now();
        s.stopped.store(true, Ordering::Release);
        s.writer.stop(|w| {
            vec![AgentStop {
                ts,
                records_written: w.records.load(Ordering::Relaxed),
                records_dropped: w.dropped_records.load(Ordering::Relaxed),
                bytes_dropped: w.dropped_bytes.load(Ordering::Relaxed),
            }
            .into()]
        });
        log_info!(
            "shutdown: {} records, {} bytes written, {} records dropped",
            s.writer.records.load(Ordering::Relaxed),
            s.writer.written_bytes.load(Ordering::Relaxed),
            s.writer.dropped_records.load(Ordering::Relaxed)
        );
        Ok(())
    }

    fn on_error(&self, callback: &'static str, error: &CallbackError) {
        log_error!("{callback}: {}", error.0);
    }

    fn app_domain_creation_finished(&self, id: AppDomainID, hr: HRESULT) -> CallbackResult {
        let Some(s) = self.state() else { return Ok(()) };
        if hr < 0 {
            return Ok(());
        }
        let name = s.info.get_app_domain_info(id)?;
        s.emit(AppDomainCreated { ts: s.now(), id: id as u64, name });
        Ok(())
    }

    fn app_domain_shutdown_finished(&self, id: AppDomainID, _hr: HRESULT) -> CallbackResult {
        let Some(s) = self.state() else { return Ok(()) };
        s.emit(AppDomainUnloaded { ts: s.now(), id: id as u64 });
        Ok(())
    }

    fn assembly_load_started(&self, id: AssemblyID) -> CallbackResult {
        let Some(s) = self.state() else { return Ok(()) };
        s.mark_start(id);
        Ok(())
    }

    fn assembly_load_finished(&self, id: AssemblyID, hr: HRESULT) -> CallbackResult {
        let Some(s) = self.state() else { return Ok(()) };
        let load_ns = s.since_start(id);
        if hr < 0 {
            return Ok(());
        }
        let (name, appdomain, module) = s.info.get_assembly_info(id)?;
        s.emit(AssemblyLoaded {
            ts: s.now(),
            id: id as u64,
            appdomain: appdomain as u64,
            module: module as u64,
            name,
            load_ns,
        });
        Ok(())
    }

    fn assembly_unload_finished(&self, id: AssemblyID, _hr: HRESULT) -> CallbackResult {
        let Some(s) = self.state() else { return Ok(()) };
        s.emit(AssemblyUnloaded { ts: s.now(), id: id as u64 });
        Ok(())
    }

    fn module_load_started(&self, id: ModuleID) -> CallbackResult {
        let Some(s) = self.state() else { return Ok(()) };
        s.mark_start(id);
        Ok(())
    }

    fn module_load_finished(&self, id: ModuleID, hr: HRESULT) -> CallbackResult {
        let Some(s) = self.state() else { return Ok(()) };
        let load_ns = s.since_start(id);
        if hr < 0 {
            return Ok(());
        }
        let (path, base, assembly) = s.info.get_module_info(id)?;
        s.emit(ModuleLoaded {
            ts: s.now(),
            id: id as u64,
            assembly: assembly as u64,
            path,
            base_address: base as u64,
            load_ns,
        });
        Ok(())
    }

    fn module_attached_to_assembly(&self, module: ModuleID, assembly: AssemblyID) -> CallbackResult {
        let Some(s) = self.state() else { return Ok(()) };
        // Repeat the module with its assembly; readers merge records of the same id.
        let (path, base, _) = s.info.get_module_info(module)?;
        s.emit(ModuleLoaded {
            ts: s.now(),
            id: module as u64,
            assembly: assembly as u64,
            path,
            base_address: base as u64,
            load_ns: 0,
        });
        Ok(())
    }

    fn module_unload_started(&self, id: ModuleID) -> CallbackResult {
        let Some(s) = self.state() else { return Ok(()) };
        s.names.forget_module(id);
        s.emit(ModuleUnloaded { ts: s.now(), id: id as u64 });
        Ok(())
    }

    fn class_load_finished(&self, id: ClassID, hr: HRESULT) -> CallbackResult {
        let Some(s) = self.state() else { return Ok(()) };
        if hr < 0 {
            return Ok(());
        }
        let ts = s.now();
        let module = s.info.get_class_id_info2(id).map(|(m, _, _, _)| m).unwrap_or(0);
        if module == 0 || s.is_collectible(module) {
            s.emit_class(&s.writer, id, ts);
        } else if let Ok(mut q) = s.deferred.lock() {
            q.push(Deferred::Class { id, ts });
        }
        Ok(())
    }

    fn class_unload_started(&self, id: ClassID) -> CallbackResult {
        let Some(s) = self.state() else { return Ok(()) };
        s.names.forget_class(id);
        crate::events::eventpipe::forget_class(s, id as u64);
        s.emit(ClassUnloaded { ts: s.now(), id: id as u64 });
        Ok(())
    }

    fn function_unload_started(&self, id: FunctionID) -> CallbackResult {
        let Some(s) = self.state() else { return Ok(()) };
        s.emit(FunctionUnloaded { ts: s.now(), id: id as u64 });
        Ok(())
    }

    fn jit_compilation_started(&self, id: FunctionID, _safe: i32) -> CallbackResult {
        let Some(s) = self.state() else { return Ok(()) };
        s.mark_start(id);
        Ok(())
    }

    fn jit_compilation_finished(&self, id: FunctionID, hr: HRESULT, _safe: i32) -> CallbackResult {
        let Some(s) = self.state() else { return Ok(()) };
        let jit_ns = s.since_start(id);
        if hr >= 0 {
            s.function_compiled(id, jit_ns, code_kind::JIT);
        }
        Ok(())
    }

    fn jit_cached_function_search_started(&self, _id: FunctionID, use_cached: OutBool) -> CallbackResult {
        use_cached.set(true);
        Ok(())
    }

    fn jit_cached_function_search_finished(&self, id: FunctionID, result: u32) -> CallbackResult {
        let Some(s) = self.state() else { return Ok(()) };
        // COR_PRF_CACHED_FUNCTION_FOUND = 0
        if result == 0 {
            s.function_compiled(id, 0, code_kind::PRECOMPILED);
        }
        Ok(())
    }

    fn runtime_suspend_started(&self, reason: u32) -> CallbackResult {
        if self.state().map(|s| s.instrumentation.is_some()).unwrap_or(false) {
            crate::elt::Instrumentation::suspend_started();
        }
        // Runtime events (issue 5): GC pauses, and every suspension in the event log.
        self.state().map_or(Ok(()), |s| gc::suspend_started(s, reason))
    }

    fn runtime_resume_finished(&self) -> CallbackResult {
        if self.state().map(|s| s.instrumentation.is_some()).unwrap_or(false) {
            crate::elt::Instrumentation::resume_finished();
        }
        self.state().map_or(Ok(()), gc::resume_finished)
    }

    fn load_as_notification_only(&self, notification_only: OutBool) -> CallbackResult {
        notification_only.set(false);
        Ok(())
    }

    fn thread_created(&self, id: ThreadID) -> CallbackResult {
        let Some(s) = self.state() else { return Ok(()) };
        s.emit(ThreadCreated { ts: s.now(), id: id as u64 });
        Ok(())
    }

    fn thread_destroyed(&self, id: ThreadID) -> CallbackResult {
        let Some(s) = self.state() else { return Ok(()) };
        s.emit(ThreadDestroyed { ts: s.now(), id: id as u64 });
        if let Some(sm) = &s.sampler {
            sm.thread_destroyed(id);
        }
        Ok(())
    }

    fn thread_assigned_to_os_thread(&self, id: ThreadID, os_tid: u32) -> CallbackResult {
        let Some(s) = self.state() else { return Ok(()) };
        s.emit(ThreadOsId { ts: s.now(), id: id as u64, os_tid });
        if let Some(sm) = &s.sampler {
            sm.thread_assigned(id, os_tid);
        }
        Ok(())
    }

    // The pointer comes from the runtime with its length; it is only read here.
    #[allow(clippy::not_unsafe_ptr_arg_deref)]
    fn thread_name_changed(&self, id: ThreadID, len: ULONG, name: *const WCHAR) -> CallbackResult {
        let Some(s) = self.state() else { return Ok(()) };
        // Safety: the runtime passes `len` UTF-16 units (not NUL-terminated) valid for the call.
        let name = unsafe { utf16_from_raw(name, len as usize) };
        s.emit(ThreadNamed { ts: s.now(), id: id as u64, name });
        Ok(())
    }

    // Runtime events (issue 5): each a one-line delegation to `crate::events`.

    fn exception_thrown(&self, object: ObjectID) -> CallbackResult {
        self.state().map_or(Ok(()), |s| exceptions::thrown(s, object))
    }

    fn exception_search_function_enter(&self, id: FunctionID) -> CallbackResult {
        self.state().map_or(Ok(()), |s| exceptions::phase(s, exception_phase::SEARCH_ENTER, id))
    }

    fn exception_search_function_leave(&self) -> CallbackResult {
        self.state().map_or(Ok(()), |s| exceptions::phase(s, exception_phase::SEARCH_LEAVE, 0))
    }

    fn exception_search_filter_enter(&self, id: FunctionID) -> CallbackResult {
        self.state().map_or(Ok(()), |s| exceptions::phase(s, exception_phase::FILTER_ENTER, id))
    }

    fn exception_search_filter_leave(&self) -> CallbackResult {
        self.state().map_or(Ok(()), |s| exceptions::phase(s, exception_phase::FILTER_LEAVE, 0))
    }

    fn exception_search_catcher_found(&self, id: FunctionID) -> CallbackResult {
        self.state().map_or(Ok(()), |s| exceptions::phase(s, exception_phase::CATCHER_FOUND, id))
    }

    fn exception_unwind_function_enter(&self, id: FunctionID) -> CallbackResult {
        self.state().map_or(Ok(()), |s| exceptions::phase(s, exception_phase::UNWIND_ENTER, id))
    }

    fn exception_unwind_function_leave(&self) -> CallbackResult {
        self.state().map_or(Ok(()), |s| exceptions::phase(s, exception_phase::UNWIND_LEAVE, 0))
    }

    fn exception_unwind_finally_enter(&self, id: FunctionID) -> CallbackResult {
        self.state().map_or(Ok(()), |s| exceptions::phase(s, exception_phase::FINALLY_ENTER, id))
    }

    fn exception_unwind_finally_leave(&self) -> CallbackResult {
        self.state().map_or(Ok(()), |s| exceptions::phase(s, exception_phase::FINALLY_LEAVE, 0))
    }

    fn exception_catcher_enter(&self, id: FunctionID, _object: ObjectID) -> CallbackResult {
        self.state().map_or(Ok(()), |s| exceptions::phase(s, exception_phase::CATCHER_ENTER, id))
    }

    fn exception_catcher_leave(&self) -> CallbackResult {
        self.state().map_or(Ok(()), |s| exceptions::phase(s, exception_phase::CATCHER_LEAVE, 0))
    }

    // The pointer comes from the runtime with its length; it is only read here.
    #[allow(clippy::not_unsafe_ptr_arg_deref)]
    fn garbage_collection_started(&self, generations: i32, collected: *const BOOL, reason: u32) -> CallbackResult {
        // Safety: the runtime passes `generations` BOOLs valid for the callback.
        let collected = unsafe { clrprof_sys::info::slice_from_raw(collected, generations.max(0) as usize) };
        self.state().map_or(Ok(()), |s| gc::started(s, collected, reason))
    }

    fn garbage_collection_finished(&self) -> CallbackResult {
        self.state().map_or(Ok(()), gc::finished)
    }

    fn object_allocated(&self, object: ObjectID, class: ClassID) -> CallbackResult {
        self.state().map_or(Ok(()), |s| alloc::allocated(s, object, class))
    }

    // The pointers come from the runtime with their lengths; they are only read here.
    #[allow(clippy::not_unsafe_ptr_arg_deref)]
    fn event_pipe_event_delivered(
        &self,
        _provider: usize,
        event_id: u32,
        event_version: u32,
        _metadata_len: ULONG,
        _metadata: *const u8,
        data_len: ULONG,
        data: *const u8,
        _activity: RawPtr,
        _related_activity: RawPtr,
        _thread: ThreadID,
        frame_count: ULONG,
        frames: *const usize,
    ) -> CallbackResult {
        let Some(s) = self.state() else { return Ok(()) };
        // Safety: the runtime passes these arrays with their lengths, valid during the callback.
        let (data, ips) = unsafe {
            (
                clrprof_sys::info::slice_from_raw(data, data_len as usize),
                clrprof_sys::info::slice_from_raw(frames, frame_count as usize),
            )
        };
        eventpipe::delivered(s, event_id, event_version, data, ips)
    }
}
