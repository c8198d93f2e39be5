//! Attach sessions (`clrprof attach PID`): the agent loaded into a running process through the
//! runtime's diagnostics IPC (`AttachProfiler`).
//!
//! - **Configuration** travels as the client data of `AttachProfiler`: `CLRPROF_*=value` lines,
//!   the same variables and the same typed [`Config`](crate::config::Config) as start-up, plus
//!   `CLRPROF_CONTROL`, the path of a Unix socket the `clrprof` CLI listens on.
//! - **Event mask**: only the bits the runtime allows after attach (`COR_PRF_ALLOWABLE_AFTER_ATTACH`):
//!   no enter/leave hooks, no per-object allocation callbacks, no cache searches.
//! - **Catch-up** in `ProfilerAttachComplete` (callbacks are already on, so a duplicate is possible,
//!   a gap is not): app domains, assemblies and modules (`EnumModules`), already-compiled
//!   functions (`EnumJITedFunctions2`, recorded as `code_kind::EXISTING`), and the managed
//!   threads (`EnumThreads`), whose CPU-time timers the sampler starts from here.
//! - **Session end**: the control thread connects to `CLRPROF_CONTROL`, says `started PATH`, and
//!   waits for `stop` (or the CLI going away). It then stops the sampler, the EventPipe session and
//!   the writer (which writes `AgentStop`: the trace is complete), answers `stopped`, and asks
//!   the runtime to detach (`RequestProfilerDetach`) as the agent's last running thread.
//! - **Detach**: the runtime waits until no thread is inside the agent, calls
//!   `ProfilerDetachSucceeded` (which answers `detached` on the control socket) and unloads the
//!   library. The library is linked with `-z nodelete`, so the unload never unmaps code that a
//!   runtime thread's thread-local destructor or a late `SIGPROF` could still run; the next
//!   attach gets the same image and a fresh profiler object with fresh state.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::Duration;

use clrprof_sys::monitor;

use super::Profiler;
use crate::{log_error, log_info, log_warn};

/// The event bits the runtime accepts from an attached profiler (`COR_PRF_ALLOWABLE_AFTER_ATTACH`
/// in corprof.idl, without DISABLE_INLINING/OPTIMIZATIONS, which only .NET 10 accepts).
pub(crate) const ALLOWED_LOW: u32 = monitor::THREADS
    | monitor::MODULE_LOADS
    | monitor::ASSEMBLY_LOADS
    | monitor::APPDOMAIN_LOADS
    | monitor::ENABLE_STACK_SNAPSHOT
    | monitor::GC
    | monitor::SUSPENDS
    | monitor::CLASS_LOADS
    | monitor::EXCEPTIONS
    | monitor::JIT_COMPILATION;
/// `COR_PRF_HIGH_ALLOWABLE_AFTER_ATTACH`.
pub(crate) const ALLOWED_HIGH: u32 = 0xF6;

/// The `AttachProfiler` client data: `KEY=VALUE` lines.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct ClientData {
    pub(crate) vars: HashMap<String, String>,
}

impl ClientData {
    pub(crate) fn parse(data: &[u8]) -> ClientData {
        let text = String::from_utf8_lossy(data);
        let vars = text
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.trim().to_string(), v.to_string()))
            .filter(|(k, _)| !k.is_empty())
            .collect();
        ClientData { vars }
    }

    pub(crate) fn get(&self, key: &str) -> Option<String> {
        self.vars.get(key).cloned()
    }
}

/// The control connection, kept for `ProfilerDetachSucceeded` to answer `detached` on.
static CONTROL: Mutex<Option<UnixStream>> = Mutex::new(None);
/// The control socket's path, from the client data.
static CONTROL_PATH: Mutex<Option<String>> = Mutex::new(None);

pub(super) fn set_control_path(path: Option<String>) {
    if let Ok(mut p) = CONTROL_PATH.lock() {
        *p = path;
    }
}

impl Profiler {
    /// `ProfilerAttachComplete`: the catch-up, then the control thread.
    pub(super) fn attach_complete(&'static self) {
        self.catch_up();
        let path = CONTROL_PATH.lock().ok().and_then(|mut p| p.take());
        let spawned = std::thread::Builder::new().name("clrprof-attach".into()).spawn(move || self.control(path));
        if let Err(e) = spawned {
            log_error!("attach: cannot start the control thread ({e}); the session runs until the process exits");
        }
    }

    /// Records what was there before the agent: app domains, assemblies, modules, compiled
    /// functions and threads (registered with the sampler).
    fn catch_up(&self) {
        let Some(s) = self.state() else { return };
        let t0 = std::time::Instant::now();
        let modules = s.info.enum_modules().unwrap_or_else(|e| {
            log_warn!("attach: {e}; modules loaded before the attach are not named");
            Vec::new()
        });
        let mut domains = std::collections::HashSet::new();
        let mut assemblies = std::collections::HashSet::new();
        use clrprof_sys::callback::ProfilerCallback;
        for &m in &modules {
            let Ok((_, _, assembly)) = s.info.get_module_info(m) else { continue };
            if assembly != 0 && assemblies.insert(assembly) {
                if let Ok((_, domain, _)) = s.info.get_assembly_info(assembly) {
                    if domain != 0 && domains.insert(domain) {
                        let _ = self.app_domain_creation_finished(domain, 0);
                    }
                }
                let _ = self.assembly_load_finished(assembly, 0);
            }
            let _ = self.module_load_finished(m, 0);
        }
        let functions = s.info.enum_jited_functions().unwrap_or_else(|e| {
            log_warn!("attach: {e}; code compiled before the attach is not named");
            Vec::new()
        });
        for &f in &functions {
            s.function_compiled(f, 0, clrprof_trace::code_kind::EXISTING);
        }
        let threads = s.info.enum_threads().unwrap_or_default();
        let mut live = 0;
        for &t in &threads {
            // EnumThreads may list threads that already died: those have no OS thread.
            let Ok(os_tid) = s.info.get_thread_info(t) else { continue };
            if os_tid == 0 || !std::path::Path::new(&format!("/proc/self/task/{os_tid}")).exists() {
                continue;
            }
            live += 1;
            let _ = self.thread_created(t);
            let _ = self.thread_assigned_to_os_thread(t, os_tid);
        }
        log_info!(
            "attach: caught up on {} modules, {} assemblies, {} app domains, {} compiled functions, {live} threads in {} µs",
            modules.len(),
            assemblies.len(),
            domains.len(),
            functions.len(),
            t0.elapsed().as_micros()
        );
    }

    /// The control thread: runs the session until `stop` or until the CLI goes away, ends it,
    /// then asks the runtime to detach the agent.
    fn control(&'static self, path: Option<String>) {
        let stream = path.as_deref().and_then(|p| match UnixStream::connect(p) {
            Ok(s) => Some(s),
            Err(e) => {
                log_error!("attach: cannot reach the control socket {p}: {e}; ending the session");
                None
            }
        });
        if let Some(s) = self.state() {
            if s.config.heap.on_attach {
                // `clrprof heap`: the snapshot is taken before the session says it started, so
                // the CLI's `stop` comes after it.
                let st: &'static super::State = s;
                let wait = Duration::from_secs(3600);
                let _ = crate::events::heap::take_on_own_thread(
                    &st.cx,
                    &st.events.heap,
                    crate::events::heap::trigger::ATTACH,
                    wait,
                );
            }
        }
        if let Some(s) = self.state() {
            // `attach --count`: counting starts before the session says it started.
            if let Some(c) = &s.attach_counts {
                c.start(&s.cx);
            }
        }
        if let Some(mut st) = stream.as_ref().and_then(|s| s.try_clone().ok()) {
            let trace = self.state().map(|s| s.trace_path.clone()).unwrap_or_default();
            let _ = writeln!(st, "started {trace}");
            self.count_top_after_window(&st);
            let _ = st.set_read_timeout(None);
            let mut lines = BufReader::new(st).lines();
            loop {
                match lines.next() {
                    Some(Ok(l)) if l.trim() == "stop" => break,
                    Some(Ok(_)) => continue,
                    // EOF or error: the CLI is gone (Ctrl-C twice, killed): end the session.
                    _ => break,
                }
            }
        }
        let summary = self.end_session();
        let Some(s) = self.state.get() else { return };
        if let Some(mut st) = stream {
            let _ = writeln!(st, "stopped {summary}");
            let _ = st.set_write_timeout(Some(Duration::from_secs(1)));
            if let Ok(mut c) = CONTROL.lock() {
                *c = Some(st);
            }
        }
        // Last: this thread is the agent's only one left and makes no runtime call after this.
        match s.info.request_profiler_detach(200) {
            Ok(()) => log_info!("attach: session ended; detach requested"),
            Err(e) => {
                log_warn!("attach: session ended; the runtime refused to detach ({e}): the agent stays loaded, idle");
                if let Ok(mut c) = CONTROL.lock() {
                    if let Some(mut st) = c.take() {
                        let _ = writeln!(st, "detach-refused 0x{:08X}", e.hr as u32);
                    }
                }
            }
        }
    }

    /// `attach --count-top`: waits out the sampling window on the control connection, then has
    /// the top methods counted — unless the CLI ends the session first (its `stop`, or the
    /// connection closing, is left unread for the session loop).
    fn count_top_after_window(&self, control: &UnixStream) {
        let Some(s) = self.state() else { return };
        let Some(c) = &s.attach_counts else { return };
        let Some(top) = c.top() else { return };
        let deadline = std::time::Instant::now() + top.after;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            if crate::os::readable_within(control, left) != Some(false) {
                let text = "attach --count-top: the session ended before its sampling window did; nothing was counted";
                log_warn!("{text}");
                s.emit(clrprof_trace::Message { ts: s.now(), level: 1, text: text.into() });
                return;
            }
        }
        c.start_top(&s.cx, s.sampler.as_ref().map(|sm| sm.take_tally()));
    }

    /// Stops the recorders and completes the trace (`AgentStop`); the process keeps running.
    fn end_session(&self) -> String {
        let Some(s) = self.state() else { return String::new() };
        if let Some(c) = &s.attach_counts {
            c.revert(&s.cx);
        }
        if let Some(sm) = &s.sampler {
            sm.stop();
        }
        let session = s.eventpipe_session.load(Ordering::Acquire);
        if session != 0 {
            if let Err(e) = s.info.event_pipe_stop_session(session) {
                log_warn!("attach: {e}");
            }
        }
        let _ = self.stop();
        format!(
            "{} {}",
            s.writer.records.load(Ordering::Relaxed),
            s.writer.written_bytes.load(Ordering::Relaxed) + clrprof_trace::header().len() as u64
        )
    }

    /// `ProfilerDetachSucceeded`: the runtime is about to unload the library; a later attach
    /// creates a new profiler object.
    pub(super) fn detached(&self) {
        log_info!("attach: detached");
        if let Ok(mut c) = CONTROL.lock() {
            if let Some(mut st) = c.take() {
                let _ = writeln!(st, "detached");
            }
        }
        super::allow_new_profiler();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_data_lines() {
        let c = ClientData::parse(b"CLRPROF_OUTPUT=/tmp/a=b.clrprof\nCLRPROF_SAMPLE_RATE=200\n\njunk\n");
        assert_eq!(c.get("CLRPROF_OUTPUT").as_deref(), Some("/tmp/a=b.clrprof"));
        assert_eq!(c.get("CLRPROF_SAMPLE_RATE").as_deref(), Some("200"));
        assert_eq!(c.vars.len(), 2);
    }

    #[test]
    fn the_attach_mask_has_no_start_up_only_bits() {
        for bit in
            [monitor::ENTERLEAVE, monitor::CACHE_SEARCHES, monitor::ENABLE_OBJECT_ALLOCATED, monitor::OBJECT_ALLOCATED]
        {
            assert_eq!(ALLOWED_LOW & bit, 0);
        }
        assert_eq!(ALLOWED_HIGH & clrprof_sys::high::MONITOR_EVENT_PIPE, clrprof_sys::high::MONITOR_EVENT_PIPE);
    }
}
