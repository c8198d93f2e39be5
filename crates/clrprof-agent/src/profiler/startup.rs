//! Start-up and shut-down: `Initialize` reads the configuration, sets the runtime's event masks,
//! opens the trace, writes its first records and starts the writer, the sampler and the other
//! recorders; `Shutdown` stops them and writes `AgentStop`.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clrprof_sys::callback::{CallbackError, CallbackResult, RawPtr};
use clrprof_sys::info::ProfilerInfo;
use clrprof_sys::monitor;
use clrprof_trace::{AgentStop, Message, ProcessStart, Record};

use super::functions::Functions;
use super::{Profiler, State};
use crate::config::Config;
use crate::context::Context;
use crate::names::Names;
use crate::writer::{Sink, Writer};
use crate::{log_error, log_info, log_warn};

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

/// With `CLRPROF_SERVER`: a writer streaming to the collector, or `None` (said once in the log)
/// when it cannot be reached or refuses the run, and the trace file is written instead.
/// The collector's settings (`CLRPROF_*=value` lines) come with it, when it sent any.
fn open_remote(
    config: &Config,
    path: &str,
    start_unix_ns: u64,
    rt: &clrprof_sys::info::RuntimeInfo,
) -> Option<(Writer, Option<String>)> {
    let server = config.server.as_deref()?;
    let hello = clrprof_trace::wire::Hello {
        kind: clrprof_trace::wire::kind::RUN,
        token: config.token.clone().unwrap_or_default(),
        host: clrprof_trace::wire::hostname(),
        pid: std::process::id(),
        start_unix_ns,
        command: command_line(),
        runtime: if rt.major > 0 { format!("{}.{}.{}", rt.major, rt.minor, rt.build) } else { String::new() },
        exit_code: 0,
        flags: clrprof_trace::wire::flags::TAKES_SETTINGS,
    };
    let fallback_path = path.to_string();
    let remote =
        crate::writer::Remote::connect(server, &config.tls, &hello, Box::new(move || open_output(&fallback_path)))
            .and_then(|mut r| {
                let settings = r.settings.take();
                Writer::new(Sink::Remote(r), Duration::from_millis(config.flush_ms)).map(|w| (w, settings))
            });
    match remote {
        Ok(w) => Some(w),
        Err(e) => {
            log_warn!("collector at {server} unreachable ({e}); writing the trace to {path}");
            None
        }
    }
}

fn unix_now_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}

/// The runtime events the configuration needs (`COR_PRF_MONITOR` low and high words): loads,
/// JIT compilation, threads and dynamic method unloads always, and what each enabled recorder
/// asks for.
fn event_mask(config: &Config, info: &ProfilerInfo) -> (u32, u32) {
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
    // `DynamicMethodUnloaded` (callbacks.rs) fires only with this flag: a collected
    // DynamicMethod's FunctionID (and code address) can be reused by new code, and the trace must
    // say when the old one died.
    let mut high = clrprof_sys::high::MONITOR_DYNAMIC_FUNCTION_UNLOADS;
    let (elt_low, elt_high) = crate::elt::Instrumentation::mask(&config.instrument);
    low |= elt_low;
    high |= elt_high;
    let (ev_low, ev_high) = crate::events::mask(config, info.version());
    low |= ev_low;
    high |= ev_high;
    (low, high)
}

impl Profiler {
    /// `Initialize` (or `InitializeForAttach`): everything the agent needs, or an error that
    /// leaves the profiler unloaded and the app running.
    pub(super) fn start(&self, unknown: RawPtr, attach: Option<super::attach::ClientData>) -> CallbackResult {
        let start = Instant::now();
        let start_unix = unix_now_ns();
        // Start-up: the process environment. Attach: the client data, the same variables.
        let (mut config, mut problems) = match &attach {
            Some(data) => Config::from_lookup(|k| data.get(k)),
            None => Config::from_lookup(|k| std::env::var(k).ok()),
        };
        let identity = crate::config::ProcessIdentity::current();
        if attach.is_none() && !identity.matches(&config.process) {
            // Exported machine-wide, the variables reach every .NET process: this one is not
            // wanted. Initialize fails, the runtime unloads the agent, nothing is written.
            if let Some(l) = &config.log {
                crate::log::init(l);
                log_info!("process {} does not match CLRPROF_PROCESS; not profiled", identity.command_line);
            }
            return Err(CallbackError("not a process CLRPROF_PROCESS selects".into()));
        }
        if let Some(l) = &config.log {
            crate::log::init(l);
        }
        install_panic_hook();
        log_info!(
            "clrprof agent {} loading ({})",
            env!("CARGO_PKG_VERSION"),
            if attach.is_some() { "attach" } else { "startup" }
        );
        for p in &problems {
            log_warn!("{p}");
        }
        if config.metadata_importer {
            log_info!("names through the runtime's metadata importer for every module (CLRPROF_METADATA=importer)");
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

        if config.count && config.instrument.enabled {
            return Err(CallbackError("IL-probe call counts cannot be combined with enter/leave hooks".into()));
        }
        let attach_count = attach.is_some() && config.count;
        if attach_count {
            let patterns = config.instrument.include.iter().any(|p| !p.trim().is_empty());
            if config.count_top == 0 && !patterns {
                return Err(CallbackError("attach --count needs patterns: the methods to count".into()));
            }
            if config.count_top > 0 && patterns {
                return Err(CallbackError("attach --count-top and --count PATTERN are exclusive".into()));
            }
            if config.count_top > 0 && !config.sampling {
                return Err(CallbackError(
                    "attach --count-top needs the sampler: it chooses from its CPU samples".into(),
                ));
            }
            if let Err(e) = crate::rejit::runtime_allows_rejit(&rt) {
                log_error!("{e}");
                return Err(CallbackError(e));
            }
        }
        if attach.is_some() && config.instrument.enabled {
            return Err(CallbackError("enter/leave instrumentation cannot be enabled after attach".into()));
        }
        let (mut low, mut high) = event_mask(&config, &info);
        if attach.is_some() {
            // Only what the runtime allows after attach (per-object allocations are refused by the CLI).
            low &= super::attach::ALLOWED_LOW;
            high &= super::attach::ALLOWED_HIGH;
            if attach_count {
                // JIT_COMPILATION as well: without it RequestReJITWithInliners sometimes does not
                // rejit (runtime #87418, dotnet-monitor's workaround).
                low |= clrprof_sys::monitor::ENABLE_REJIT | clrprof_sys::monitor::JIT_COMPILATION;
            }
        }
        info.set_event_mask2(low, high)?;
        let (glow, ghigh) = info.get_event_mask2().unwrap_or((low, high));
        log_info!("event mask requested 0x{low:08x}/0x{high:08x}, granted 0x{glow:08x}/0x{ghigh:08x}");

        let path = config.output_path_for(std::process::id(), &identity.name(), start_unix / 1_000_000_000);
        super::attach::set_control_path(attach.as_ref().and_then(|d| d.get("CLRPROF_CONTROL")));
        let writer = match open_remote(&config, &path, start_unix, &rt) {
            Some((w, settings)) => {
                if let Some(text) = settings {
                    let more = config.take_collector_settings(&text);
                    for p in &more {
                        log_warn!("{p}");
                    }
                    if !config.triggers.rules.is_empty() {
                        log_info!("triggers from the collector: {}", text.replace('\n', "; "));
                    }
                    problems.extend(more);
                }
                Arc::new(w)
            }
            None => {
                let (file, path) = open_output(&path).map_err(|e| {
                    log_error!("cannot create trace file {path}: {e}; profiler not loaded");
                    CallbackError(format!("cannot create {path}: {e}"))
                })?;
                log_info!("writing trace to {path}");
                Arc::new(Writer::new(Sink::File(file), Duration::from_millis(config.flush_ms))?)
            }
        };
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
            host: std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default().trim().to_string(),
            service: config.service.clone(),
            labels: config.labels_lines(),
        }
        .into()];
        for p in &problems {
            first.push(Message { ts: 0, level: 1, text: p.to_string() }.into());
        }
        if attach.is_some() {
            first.push(
                Message {
                    ts: 0,
                    level: 0,
                    text: "attached to the running process: what happened before is not in the trace; the session ends with the process still running".into(),
                }
                .into(),
            );
        }
        let instrumentation = if config.instrument.enabled {
            let (i, rec) =
                crate::elt::Instrumentation::new(config.instrument.clone(), start.elapsed().as_nanos() as u64);
            first.push(rec.into());
            Some(i)
        } else {
            None
        };
        let attach_counts = if attach_count {
            let top = (config.count_top > 0).then(|| crate::rejit::Top {
                n: config.count_top,
                after: Duration::from_millis(config.count_after_ms),
            });
            let (c, rec) = crate::rejit::AttachCounts::new(&config.instrument.include, &config.instrument.exclude, top)
                .ok_or_else(|| CallbackError("no memory for the call counters".into()))?;
            first.push(rec.into());
            Some(c)
        } else {
            None
        };
        let counts = if config.count && !attach_count {
            let (c, rec) =
                crate::count::Counts::new(&config.instrument.include, &config.instrument.exclude, config.count_all)
                    .ok_or_else(|| CallbackError("no memory for the call counters".into()))?;
            first.push(rec.into());
            Some(c)
        } else {
            None
        };
        writer.write_now(&first);
        writer.set_exact(config.exact_mode());
        writer.set_buffer_cap(config.buffer_bytes);
        let functions = Functions::default();
        let pc = Arc::clone(&functions.pending_code);
        writer.add_tick(Box::new(move |w| pc.resolve(&info, w, w.is_stopping())));
        let events = Arc::new(crate::events::Events::default());
        let ev = Arc::clone(&events);
        let alloc_names = Names::new(info, !config.metadata_importer);
        writer.add_tick(Box::new(move |w| ev.alloc.drain(&alloc_names, w, start.elapsed().as_nanos() as u64)));
        writer.start()?;
        let sampler = if config.sampling {
            let s = crate::sampler::Sampler::new(
                info,
                Arc::clone(&writer),
                start,
                config.sample_rate,
                config.cache_dir.as_ref().map(std::path::PathBuf::from),
            );
            match s.start() {
                Ok(()) => {
                    if attach_count && config.count_top > 0 {
                        s.keep_tally();
                    }
                    Some(s)
                }
                Err(e) => {
                    log_error!("sampler not started: {e}");
                    None
                }
            }
        } else {
            None
        };
        let names = Names::new(info, !config.metadata_importer);
        let state = State {
            cx: Context::new(info, config, writer, names, start),
            started: Mutex::new(HashMap::new()),
            functions,
            sampler,
            instrumentation,
            counts,
            attach_counts,
            events,
            trace_path: path,
            eventpipe_session: AtomicU64::new(0),
        };
        self.state.set(state).map_err(|_| CallbackError("initialized twice".into()))?;
        if let Some(s) = self.state.get() {
            // Safety: the profiler object is never freed (see `ComObject::create`), so its state
            // lives for the rest of the process.
            let st: &'static State = unsafe { &*(s as *const State) };
            st.writer.add_tick(Box::new(move |w| st.functions.resolve_deferred(&st.cx, w)));
            if attach.is_some() {
                if let Some(sm) = &st.sampler {
                    sm.name_precompiled_code(Box::new(move |id| {
                        st.function_compiled(id, 0, clrprof_trace::code_kind::PRECOMPILED)
                    }));
                }
            }
            if let Some(i) = &st.instrumentation {
                i.install(&st.info, &st.cx)?;
                st.writer.add_tick(Box::new(move |w| {
                    if let Some(i) = &st.instrumentation {
                        i.publish(w, st.now());
                    }
                }));
                log_info!("enter/leave hooks installed");
            }
            if st.counts.is_some() {
                st.writer.add_tick(Box::new(move |w| {
                    if let Some(c) = &st.counts {
                        c.publish(w, st.now());
                    }
                }));
                log_info!("call counts by IL probes ({} scope)", if st.config.count_all { "all" } else { "app" });
            }
            if st.attach_counts.is_some() {
                st.writer.add_tick(Box::new(move |w| {
                    if let Some(c) = &st.attach_counts {
                        c.publish(w, st.now());
                    }
                }));
            }
            if st.config.exceptions && !st.config.every_exception() {
                st.writer.add_tick(Box::new(move |w| {
                    st.events.limiter.tick(st, &st.events.exceptions(), w);
                    st.events.exception_counts.publish(w, st.now());
                }));
            }
            // Allocation samples (EventPipe), thinned to the process's allowance and packed once
            // per flush. The event log keeps every one, and so does `--alloc exact`: its site
            // walks (one per 16 KiB) share out the exact counts, and thinning them to 100 a second
            // put the CSV constructor's share of strings 25% off (1.246) in a loaded .NET 8 run.
            let keep_all = st.config.events || st.config.alloc == crate::config::AllocMode::Exact;
            st.events.alloc_samples.set_rate(if keep_all { 0 } else { st.config.alloc_rate });
            st.writer.add_tick(Box::new(move |w| st.events.alloc_samples.publish(w, st.now())));
            if st.config.locks && !st.config.events {
                st.writer.add_tick(Box::new(move |w| st.events.contention.publish(w, st.now())));
            }
            if st.config.asynchrony {
                // Task events (EventPipe, `CLRPROF_ASYNC`), packed once per flush.
                st.writer.add_tick(Box::new(move |w| st.events.tasks.publish(w, st.now())));
            }
            let ids_from_events = st.config.asynchrony
                && st.config.sampling
                && st.sampler.is_some()
                && crate::events::flow::from_events(rt.major);
            if ids_from_events {
                crate::events::flow::use_events();
            }
            if let Some(id) =
                crate::events::eventpipe::start(s, rt.major, &crate::events::providers::requested(s, rt.major))
            {
                s.eventpipe_session.store(id, Ordering::Release);
                if ids_from_events {
                    crate::events::flow::record_events(s);
                }
            }
            crate::events::heap::schedule(&st.cx, &st.events.heap);
            let sampler = st.sampler.clone();
            let base_rate = sampler.as_ref().map_or(st.config.sample_rate, |s| s.rate_hz());
            crate::triggers::start(
                &st.cx,
                crate::triggers::Actions {
                    set_rate: Box::new(move |hz| {
                        if let Some(s) = &sampler {
                            s.set_cpu_rate(hz)
                        }
                    }),
                    base_rate,
                    snapshot: Box::new(move || {
                        crate::events::heap::take(&st.cx, &st.events.heap, crate::events::heap::trigger::TRIGGER)
                            .snapshot
                    }),
                },
            );
        }
        log_info!("initialized in {} µs", start.elapsed().as_micros());
        Ok(())
    }

    /// `Shutdown`: stops the sampler, then the writer, which writes `AgentStop` and flushes.
    pub(super) fn stop(&self) -> CallbackResult {
        let Some(s) = self.state() else { return Ok(()) };
        // The sampler stops first: it calls the runtime and writes through the writer.
        if let Some(sm) = &s.sampler {
            sm.stop();
        }
        crate::events::flow::log_cost();
        let ts = s.now();
        s.stop();
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
            "shutdown: {} records, {} bytes written, {} records dropped; threads waited for room {} times, {} ms in all",
            s.writer.records.load(Ordering::Relaxed),
            s.writer.written_bytes.load(Ordering::Relaxed),
            s.writer.dropped_records.load(Ordering::Relaxed),
            s.writer.waits.load(Ordering::Relaxed),
            s.writer.waited_ns.load(Ordering::Relaxed) / 1_000_000
        );
        Ok(())
    }
}

/// Routes panics in the agent's own code to its log (they are caught at every entry point and
/// must print nothing on the app's stderr) and chains every other panic to the hook the process
/// had, so a host with Rust code of its own keeps its behaviour. Installed once.
fn install_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if info.location().is_some_and(|l| is_agent_source(l.file())) {
                crate::log::write("panic", format_args!("{info}"));
            } else {
                previous(info);
            }
        }));
    });
}

/// True for source files of the agent's crates (`crates/clrprof-agent/…`, `crates/clrprof-sys/…`,
/// `crates/clrprof-trace/…`), where every panic is caught before it reaches the runtime.
fn is_agent_source(file: &str) -> bool {
    ["clrprof-agent/", "clrprof-sys/", "clrprof-trace/"].iter().any(|c| file.contains(c))
}

#[cfg(test)]
mod panic_hook_tests {
    #[test]
    fn the_agent_s_own_sources_are_told_apart() {
        assert!(super::is_agent_source("crates/clrprof-agent/src/sampler/cpu.rs"));
        assert!(super::is_agent_source("/build/crates/clrprof-sys/src/info.rs"));
        assert!(!super::is_agent_source("/usr/share/cargo/registry/libc-0.2.139/src/lib.rs"));
        assert!(!super::is_agent_source("src/main.rs"));
    }
}
