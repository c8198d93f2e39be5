//! The sampling profiler (Monte Carlo): CPU time from per-thread CPU-time timers ([`cpu`]), wall
//! time with exact managed stacks from suspended `DoStackSnapshot` walks ([`wall`]), native module
//! mappings for naming native IPs later ([`native`], with each file's [`build_id`]).
//!
//! One native sampler thread drains the per-thread sample rings, weighs CPU samples with the
//! thread's measured CPU time, takes wall-clock samples, interns stacks and emits the sampling
//! records (trace tags 50–69). Every record of the sampler comes from that one thread, so readers
//! see them in order.
//!
//! Wall time: at each tick, a thread whose CPU clock did not move since its last wall sample is
//! still blocked where it was, so its last stack is reused without a walk. A thread that is running
//! or runnable (state `R` in `/proc/self/task/<tid>/stat`) takes its latest CPU-sample stack. Only
//! the others — threads that ran a little and then blocked — are walked, a few per
//! `SuspendRuntime` … `ResumeRuntime`.
//!
//! Every nanosecond of a thread's life, from its registration to its death (or the sampler's
//! stop), is charged to exactly one stack: an interval in which the thread blocked or woke up is
//! split by its CPU-clock delta and its run-queue wait from `schedstat`: the part it ran or waited
//! for a CPU goes to its running stack, the rest to where it was blocked. A blocked stack is reused
//! only while the thread provably did not run (its CPU clock did not move): once it ran, the stack
//! it had is stale even if it is blocked again (it may have woken up and blocked elsewhere), and
//! its blocked time waits for the walk that tells where — on a busy machine the walk can be a
//! suspension interval away, and the old stack used to keep that time. Blocked time whose stack is
//! not known yet waits for the walk instead of going to the stack the thread ran before it blocked.

pub mod build_id;
pub mod cfi;
pub mod codes;
pub mod cpu;
pub mod native;
pub mod prolog;
pub mod slot;
#[cfg(test)]
mod tests;
mod unwind;
pub mod wall;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use clrprof_sys::{FunctionID, ProfilerInfo, ThreadID};
use clrprof_trace::{
    CodeRange, CpuSample, NativeMapping, Record, SampleStack, SamplerStats, SamplingStart, WallSample,
};

use crate::os;
use crate::writer::Writer;
use crate::{log_info, log_warn};

/// Highest wall-clock tick rate (each tick reads every thread's CPU clock).
pub const MAX_WALL_HZ: u32 = 250;
/// Stacks interned before the table is reset (ids are then redefined).
const MAX_INTERNED: usize = 200_000;
/// Shortest time between two runtime suspensions of the wall sampler.
const MIN_SUSPEND_INTERVAL: Duration = Duration::from_millis(100);
/// Most threads a wall tick looks at (each costs a read of the thread's CPU clock).
const MAX_THREADS_PER_TICK: usize = 64;
/// Most threads walked in one suspension (the suspension lasts as long as the walks).
const MAX_WALKS_PER_SUSPEND: usize = 8;
/// Shortest time between two reads of the process's mappings.
const MIN_MAPS_INTERVAL: Duration = Duration::from_millis(20);
/// Pending wall samples are written at least this often.
const WALL_FLUSH: Duration = Duration::from_secs(1);

#[derive(Default)]
struct Stats {
    cpu_samples: AtomicU64,
    wall_ticks: AtomicU64,
    walks: AtomicU64,
    suspend_failures: AtomicU64,
    walk_failures: AtomicU64,
    timer_failures: AtomicU64,
    threads: AtomicU64,
    suspended_ns: AtomicU64,
}

/// The sampler: started at `Initialize`, stopped at `Shutdown` before the writer.
pub struct Sampler {
    info: ProfilerInfo,
    writer: Arc<Writer>,
    start: Instant,
    rate_hz: u32,
    stop: AtomicBool,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// Held from SuspendRuntime to ResumeRuntime; `ThreadDestroyed` waits on it so a thread is
    /// never walked after the runtime forgot it.
    walk_lock: Mutex<()>,
    stats: Stats,
    /// Functions that got native code since the sampler last looked (JIT or ReadyToRun).
    new_code: Mutex<Vec<FunctionID>>,
    /// Attach: ReadyToRun code loaded before the agent is named from sampled addresses
    /// (`GetFunctionFromIP`); this records each function found that way.
    precompiled_found: std::sync::OnceLock<Box<dyn Fn(FunctionID) + Send + Sync>>,
    /// Unwind rules of native code published to the signal handler.
    native_rules: Mutex<NativeRulesState>,
    /// Where unwind rules read from files are kept for later processes (`CLRPROF_CACHE_DIR`).
    cache_dir: Option<PathBuf>,
    /// Frameless code published to the signal handler that the runtime can free, by what frees it
    /// (a DynamicMethod's id, a collectible module's id): removed before the memory is.
    unloadable: Mutex<HashMap<u64, Vec<u64>>>,
    /// Code that can unload (DynamicMethods, collectible modules), which the sampler thread's map
    /// of managed code does not hold: a frameless leaf's caller there is still recognized.
    dynamic_code: Mutex<DynamicCode>,
    /// Frameless ranges of code that can unload: published, and forgotten at an unload (logged at
    /// the end).
    unloadable_published: AtomicU64,
    unloadable_forgotten: AtomicU64,
    /// The signal handler's table of frameless code was found full (said once).
    frameless_full: AtomicBool,
    /// Urgent rounds asked for ([`Sampler::flush_urgently`]) and the last one the sampler did.
    urgent_asked: AtomicU64,
    urgent_done: AtomicU64,
}

/// Code ranges that can unload (start → end), and their starts by what frees them.
#[derive(Default)]
struct DynamicCode {
    ranges: std::collections::BTreeMap<u64, u64>,
    by_key: HashMap<u64, Vec<u64>>,
}

/// Most ranges of code that can unload remembered at once (a runtime that never reports the
/// unloads cannot grow it without bound).
const MAX_DYNAMIC_RANGES: usize = 1 << 20;

/// A file's unwind rows (leaked for the handler) and loadable segments (file offset, address,
/// size).
type FileRows = (&'static [u64], Vec<(u64, u64, u64)>);

/// The native files whose unwind rules were read and the mappings published.
#[derive(Default)]
struct NativeRulesState {
    /// By path: the rows (leaked for the handler) and the file's loadable segments.
    files: HashMap<String, Option<FileRows>>,
    published: std::collections::HashSet<(u64, u64)>,
    /// The handler's table filled up (said once in the log).
    full: bool,
    /// The handler's table of executable mappings filled up (said once in the log).
    full_exec: bool,
    /// Files whose rules were read from their `.eh_frame` and from the cache, and the time spent
    /// (logged at the end).
    parsed: u32,
    from_cache: u32,
    read_ns: u64,
}

impl Sampler {
    pub fn new(
        info: ProfilerInfo,
        writer: Arc<Writer>,
        start: Instant,
        rate_hz: u32,
        cache_dir: Option<PathBuf>,
    ) -> Arc<Sampler> {
        Arc::new(Sampler {
            info,
            cache_dir,
            writer,
            start,
            rate_hz: rate_hz.clamp(1, 10_000),
            stop: AtomicBool::new(false),
            urgent_asked: AtomicU64::new(0),
            urgent_done: AtomicU64::new(0),
            thread: Mutex::new(None),
            walk_lock: Mutex::new(()),
            stats: Stats::default(),
            new_code: Mutex::new(Vec::new()),
            precompiled_found: std::sync::OnceLock::new(),
            native_rules: Mutex::new(NativeRulesState::default()),
            unloadable: Mutex::new(HashMap::new()),
            dynamic_code: Mutex::new(DynamicCode::default()),
            unloadable_published: AtomicU64::new(0),
            unloadable_forgotten: AtomicU64::new(0),
            frameless_full: AtomicBool::new(false),
        })
    }

    /// Attach: names sampled addresses in managed images that no code callback reported
    /// (ReadyToRun code loaded before the agent) through `GetFunctionFromIP`, and calls `found`
    /// once for each function found that way.
    pub fn name_precompiled_code(&self, found: Box<dyn Fn(FunctionID) + Send + Sync>) {
        let _ = self.precompiled_found.set(found);
    }

    /// Looks up the sampled addresses in managed images that the map of managed code does not
    /// hold (attach only): each is asked of the runtime once; a function found has all its code
    /// versions added to the map.
    fn find_precompiled(&self, st: &mut LoopState, ips: &[u64]) {
        let Some(found) = self.precompiled_found.get() else { return };
        for (i, &ip) in ips.iter().enumerate() {
            let at = if i > 0 { ip.saturating_sub(1) } else { ip };
            if st.function_at(at).is_some() || !st.maps.is_managed_image(at) || st.not_code.contains(&at) {
                continue;
            }
            let id = match self.info.get_function_from_ip(at as usize) {
                Ok(id) if id != 0 => id,
                _ => {
                    if st.not_code.len() >= 1 << 20 {
                        st.not_code.clear();
                    }
                    st.not_code.insert(at);
                    continue;
                }
            };
            for start in self.info.get_native_code_start_addresses(id).unwrap_or_default() {
                if start == 0 || !st.code_starts.insert(start as u64) {
                    continue;
                }
                for (a, n) in code_ranges(&self.info, start) {
                    st.code.insert(a, (a + n, id as u64));
                    self.emit(CodeRange { id: id as u64, start: a, size: n });
                }
            }
            if st.function_at(at).is_none() {
                st.not_code.insert(at);
            }
            st.known_functions.insert(id as u64);
            found(id);
        }
    }

    /// Attach: names the functions of a walked stack that run precompiled code loaded before the
    /// agent (the host's ReadyToRun code, blocked under a wait since before the attach: no CPU
    /// sample and no code callback ever names it). Each such FunctionID the agent has not reported
    /// is reported once, as `find_precompiled` does for sampled addresses.
    fn name_walked(&self, st: &mut LoopState, frames: &[(u64, u64)]) {
        let Some(found) = self.precompiled_found.get() else { return };
        for (i, &(f, ip)) in frames.iter().enumerate() {
            if f == 0 || st.known_functions.contains(&f) {
                continue;
            }
            let at = if i > 0 { ip.saturating_sub(1) } else { ip };
            if !st.maps.is_managed_image(at) {
                continue;
            }
            // Reported since this pass's `update_code` (compiled a moment ago): named already.
            if self.new_code.lock().map(|v| v.contains(&(f as FunctionID))).unwrap_or(true) {
                continue;
            }
            st.known_functions.insert(f);
            found(f as FunctionID);
        }
    }

    fn now(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    fn period_ns(&self) -> u64 {
        1_000_000_000 / self.rate_hz as u64
    }

    fn wall_hz(&self) -> u32 {
        self.rate_hz.min(MAX_WALL_HZ)
    }

    /// Installs the signal handler and starts the sampler thread.
    pub fn start(self: &Arc<Self>) -> std::io::Result<()> {
        // The unwind rules of the C library and of the agent itself, before any thread is
        // sampled: the code without frame pointers that every thread runs from the start (system
        // call wrappers, allocation, the agent's callbacks) is walked from the first sample on.
        // The other libraries' rules are published by the sampler thread as it starts (the
        // runtime's own libraries keep frame pointers) and as they are mapped.
        let t = Instant::now();
        let text = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
        self.publish_exec_ranges(&native::exec_ranges(&text));
        let maps = native::parse_maps(&text);
        let me = Sampler::start as *const () as u64;
        let first: Vec<&native::Mapping> = maps
            .iter()
            .filter(|m| {
                let name = m.path.rsplit('/').next().unwrap_or("");
                name.starts_with("libc.so")
                    || name.starts_with("libc-")
                    || maps.iter().any(|a| a.path == m.path && a.start <= me && me < a.end)
            })
            .collect();
        for m in &first {
            self.add_native_rules(m);
        }
        log_info!(
            "sampler: unwind rules of {} native mappings read in {:.1} ms",
            first.len(),
            t.elapsed().as_secs_f64() * 1e3
        );
        cpu::install_handler()?;
        let me = Arc::clone(self);
        let h = std::thread::Builder::new().name("clrprof-sampler".into()).spawn(move || me.run())?;
        if let Ok(mut t) = self.thread.lock() {
            *t = Some(h);
        }
        Ok(())
    }

    /// Stops the sampler thread after a last drain (before the writer stops). Timers are deleted
    /// so no signal arrives after Shutdown.
    /// Makes the sampler thread drain the CPU samples and write its pending wall samples at its
    /// next tick, and waits for it, `timeout` at most: for a thread that knows the process is about
    /// to die. Returns whether it was done.
    pub fn flush_urgently(&self, timeout: Duration) -> bool {
        if self.stop.load(Ordering::Acquire) {
            return false;
        }
        let ticket = self.urgent_asked.fetch_add(1, Ordering::AcqRel) + 1;
        let deadline = Instant::now() + timeout;
        while self.urgent_done.load(Ordering::Acquire) < ticket {
            if Instant::now() >= deadline || self.stop.load(Ordering::Acquire) {
                return false;
            }
            std::thread::sleep(Duration::from_micros(500));
        }
        true
    }

    pub fn stop(&self) {
        if self.stop.swap(true, Ordering::AcqRel) {
            return;
        }
        let h = self.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(h) = h {
            let _ = h.join();
        }
        log_info!(
            "sampler: frameless code that can unload: {} ranges published, {} forgotten at their unload",
            self.unloadable_published.load(Ordering::Relaxed),
            self.unloadable_forgotten.load(Ordering::Relaxed)
        );
        if let Ok(st) = self.native_rules.lock() {
            log_info!(
                "sampler: unwind rules of {} files read from their .eh_frame and {} from the cache ({}) in {:.1} ms",
                st.parsed,
                st.from_cache,
                self.cache_dir.as_deref().map_or("none".into(), |d| d.display().to_string()),
                st.read_ns as f64 / 1e6
            );
        }
    }

    /// `ThreadAssignedToOSThread`, on the thread itself.
    pub fn thread_assigned(&self, id: ThreadID, os_tid: u32) {
        if self.stop.load(Ordering::Acquire) {
            return;
        }
        let registered = self.now().max(1);
        let (slot, err) = cpu::register_current(os_tid, id, Some(self.period_ns()));
        if let Some(s) = slot {
            s.died_ns.store(0, Ordering::Relaxed);
            // Release: the sampler reads `start_cpu_ns` after seeing this.
            s.registered_ns.store(registered, Ordering::Release);
            self.stats.threads.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(e) = err {
            self.stats.timer_failures.fetch_add(1, Ordering::Relaxed);
            log_warn!("sampler: {e}");
        }
    }

    /// A function got native code (`JITCompilationFinished`, `JITCachedFunctionSearchFinished`):
    /// its code versions are looked up later, on the sampler thread.
    /// Code that can be freed (`unloads_with`: the DynamicMethod's or the collectible module's id, 0
    /// when the runtime could not say) is looked up at once, on the compiling thread: its ids die at
    /// unload and must never be handed to the runtime later. Its frame size is published to the
    /// signal handler when it has no RBP frame (so the walk keeps the callers of a small
    /// DynamicMethod) and taken back by [`Sampler::code_unloading`]. A JIT compilation that gave
    /// the function a second code version may be an OSR version, which the running tier-0 frame
    /// enters as soon as this callback returns: it is made known to the signal handler at once.
    pub fn code_compiled(&self, id: FunctionID, unloads_with: Option<u64>, jitted: bool) {
        let Some(key) = unloads_with else {
            if jitted {
                self.add_osr_versions(id);
            }
            if let Ok(mut v) = self.new_code.lock() {
                if v.len() < 1 << 20 {
                    v.push(id);
                }
            }
            return;
        };
        for start in self.info.get_native_code_start_addresses(id).unwrap_or_default() {
            if start == 0 {
                continue;
            }
            let ranges = code_ranges(&self.info, start);
            for &(a, n) in &ranges {
                self.emit(CodeRange { id: id as u64, start: a, size: n });
            }
            if let Ok(mut d) = self.dynamic_code.lock() {
                if d.ranges.len() + ranges.len() > MAX_DYNAMIC_RANGES {
                    *d = DynamicCode::default();
                }
                for &(a, n) in &ranges {
                    d.ranges.insert(a, a + n);
                    d.by_key.entry(key).or_default().push(a);
                }
            }
            if key != 0 {
                // Safety: `ranges` are the live code of the version just compiled (it cannot be
                // freed before this callback returns).
                if let Some(f) = unsafe { prolog::frameless_frame_of(start as u64, &ranges) } {
                    self.add_unloadable_frameless(key, start as u64, &ranges, f);
                }
            }
        }
    }

    /// Publishes the entry range of a frameless code version that can be freed, remembered under
    /// `key` for [`Sampler::code_unloading`]. An older entry at the same address (code freed
    /// without its unload being seen) is replaced.
    fn add_unloadable_frameless(&self, key: u64, start: u64, ranges: &[(u64, u64)], f: codes::FramelessFrame) {
        let Some(&(a, n)) = ranges.iter().find(|&&(a, _)| a == start) else { return };
        let Ok(mut m) = self.unloadable.lock() else { return };
        codes::remove_frameless_code(a);
        if codes::add_frameless_code(a, a + n, f) {
            m.entry(key).or_default().push(a);
            self.unloadable_published.fetch_add(1, Ordering::Relaxed);
        } else {
            self.frameless_table_full();
        }
    }

    /// Says once that frameless code no longer fits the signal handler's table.
    fn frameless_table_full(&self) {
        if !self.frameless_full.swap(true, Ordering::Relaxed) {
            let max = codes::MAX_FRAMELESS_RANGES;
            log_warn!("sampler: over {max} frameless code ranges; later ones lose their callers");
        }
    }

    /// A DynamicMethod or a collectible module is about to be freed (`DynamicMethodUnloaded`,
    /// `ModuleUnloadStarted`): its frameless code leaves the signal handler's table first, so code
    /// compiled later at the same addresses is never walked with its frame size.
    pub fn code_unloading(&self, key: u64) {
        if let Ok(mut d) = self.dynamic_code.lock() {
            for a in d.by_key.remove(&key).unwrap_or_default() {
                d.ranges.remove(&a);
            }
        }
        let Ok(mut m) = self.unloadable.lock() else { return };
        for a in m.remove(&key).unwrap_or_default() {
            if codes::remove_frameless_code(a) {
                self.unloadable_forgotten.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Publishes the OSR code versions of `id` and the frames of its code versions without an RBP
    /// frame to the signal handler, on the compiling thread: the code runs as soon as it is
    /// published, and the sampler thread's own lookup ([`Sampler::update_code`]) comes a tick or
    /// more later — much more on a busy machine, where samples in the new code lost the callers the
    /// tables keep. (Its JIT compilations are already published when `JITCompilationFinished` is
    /// raised; a version the runtime publishes later is the sampler thread's.) Only for code that
    /// never unloads.
    fn add_osr_versions(&self, id: FunctionID) {
        let starts = self.info.get_native_code_start_addresses(id).unwrap_or_default();
        for start in starts {
            let start = start as u64;
            if start == 0 || codes::osr_code_known(start) || codes::frameless_code_known(start) {
                continue;
            }
            let ranges: Vec<(u64, u64)> = code_ranges(&self.info, start as usize);
            // An OSR version always has its tier-0 version beside it.
            // Safety: `ranges` are the code of a live code version of a function whose module
            // never unloads (the caller checked).
            if unsafe { prolog::is_osr_code(start, &ranges) } {
                for (a, n) in ranges {
                    codes::add_osr_code(a, a + n);
                }
            // Safety: as above.
            } else if let Some(f) = unsafe { prolog::frameless_frame_of(start, &ranges) } {
                if let Some(&(a, n)) = ranges.iter().find(|&&(a, _)| a == start) {
                    if !codes::add_frameless_code(a, a + n, f) {
                        self.frameless_table_full();
                    }
                }
            }
        }
    }

    /// Looks up the code versions of recently compiled functions (again a few times until a new
    /// one appears, as a version is published a little after its compilation; a found version ends
    /// the lookups of its compilation) and adds their ranges to the map of
    /// managed code. The map, not `GetFunctionFromIP`, names managed IPs: arbitrary addresses
    /// from stack words are never handed to the runtime.
    fn update_code(&self, st: &mut LoopState) {
        let fresh = self.new_code.lock().map(|mut v| std::mem::take(&mut *v)).unwrap_or_default();
        if self.precompiled_found.get().is_some() {
            st.known_functions.extend(fresh.iter().map(|&id| id as u64));
        }
        st.code_pending.extend(fresh.into_iter().map(|id| (id, 0u32)));
        let mut pending = std::mem::take(&mut st.code_pending);
        pending.retain_mut(|(id, tries)| {
            *tries += 1;
            // Each compilation publishes one code version: once a version not known before is
            // found, this compilation's is (a version another compilation published is found by
            // that one's entry, or was already known).
            let mut found = false;
            if matches!(*tries, 1 | 3 | 10 | 30 | 100) {
                for start in self.info.get_native_code_start_addresses(*id).unwrap_or_default() {
                    if start == 0 || st.code_starts.contains(&(start as u64)) {
                        continue;
                    }
                    let ranges = code_ranges(&self.info, start);
                    // Not published yet: looked up again at the next try.
                    if ranges.is_empty() {
                        continue;
                    }
                    st.code_starts.insert(start as u64);
                    found = true;
                    // Safety: `ranges` are the code of a live code version of a function whose
                    // module never unloads (collectible code is handled in `code_compiled`).
                    let osr = unsafe { prolog::is_osr_code(start as u64, &ranges) };
                    // Safety: as above.
                    let frameless =
                        if osr { None } else { unsafe { prolog::frameless_frame_of(start as u64, &ranges) } };
                    for (a, n) in ranges {
                        st.code.insert(a, (a + n, *id as u64));
                        self.emit(CodeRange { id: *id as u64, start: a, size: n });
                        if osr && !codes::add_osr_code(a, a + n) && !st.osr_full {
                            st.osr_full = true;
                            let max = codes::MAX_OSR_RANGES;
                            log_warn!("sampler: over {max} OSR code ranges; later ones lose their callers");
                        }
                        // Only the range holding the entry (and the prolog that was read).
                        if let Some(f) = frameless.filter(|_| a == start as u64) {
                            if !codes::add_frameless_code(a, a + n, f) {
                                self.frameless_table_full();
                            }
                        }
                    }
                }
            }
            *tries < 100 && !found
        });
        st.code_pending = pending;
    }

    /// `ThreadDestroyed`: waits for an in-flight walk, then retires the thread's slot.
    pub fn thread_destroyed(&self, id: ThreadID) {
        // Its wall time ends now, not when an in-flight walk lets go of the lock (ticks leave a
        // dying thread alone).
        if let Some(s) = slot::slot_of_thread(id) {
            let _ = s.died_ns.compare_exchange(0, self.now().max(1), Ordering::AcqRel, Ordering::Relaxed);
        }
        let _g = self.walk_lock.lock();
        if let Some(s) = slot::slot_of_thread(id) {
            self.retire(s);
        }
    }

    /// Stops a thread's sampling, noting when (its wall time ends there).
    fn retire(&self, s: &slot::Slot) {
        let _ = s.died_ns.compare_exchange(0, self.now().max(1), Ordering::AcqRel, Ordering::Relaxed);
        cpu::unregister(s); // publishes `died_ns` (release store of the state)
    }

    fn emit(&self, r: impl Into<Record>) {
        self.writer.emit(&r.into());
    }

    fn run(&self) {
        let wall = match self.info.initialize_current_thread() {
            Ok(()) => true,
            Err(e) => {
                log_warn!("sampler: {e}; wall-clock sampling is off");
                false
            }
        };
        self.emit(SamplingStart {
            ts: self.now(),
            cpu_rate_hz: self.rate_hz,
            wall_rate_hz: if wall { self.wall_hz() } else { 0 },
            max_frames: slot::MAX_FRAMES as u32,
            max_walk_frames: wall::MAX_WALK_FRAMES as u32,
        });
        log_info!("sampler: {} Hz CPU, {} Hz wall", self.rate_hz, if wall { self.wall_hz() } else { 0 });
        let mut st = LoopState::default();
        // The native code mapped now, with its unwind rules, before the first tick.
        self.emit_mappings(&mut st);
        let tick = 1_000_000_000 / self.wall_hz() as u64;
        let mut rng = 0x2545_f491_4f6c_dd1d_u64 ^ self.start.elapsed().as_nanos() as u64;
        let mut last_maps = Some(Instant::now());
        let mut last_flush = Instant::now();
        while !self.stop.load(Ordering::Acquire) {
            // Randomized interval (±25 %) so ticks do not alias with periodic work.
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let d = tick - tick / 4 + rng % (tick / 2 + 1);
            std::thread::sleep(Duration::from_nanos(d));
            // Every second, or soon after a sample's leaf lay in code no mapping known holds (a
            // library loaded since: its unwind rules are needed for the next samples in it).
            let due = if st.unknown_leaf { MIN_MAPS_INTERVAL } else { Duration::from_secs(1) };
            if last_maps.is_none_or(|t| t.elapsed() >= due) {
                st.unknown_leaf = false;
                self.emit_mappings(&mut st);
                last_maps = Some(Instant::now());
            }
            self.update_code(&mut st);
            // Threads registered at attach start recording once their stack is found and the
            // code above is published (cheap when none waits); their CPU time counts from then.
            for s in slot::learn_stack_bounds() {
                if let Some(ths) = st.threads.get_mut(&SlotKey::of(s)) {
                    ths.cpu_accounted = s.start_cpu_ns.load(Ordering::Relaxed);
                }
            }
            // An urgent round asked for before this point (the process is about to die) is served
            // by this one: the samples drained below and the pending wall samples, without a wall
            // tick (its walks suspend the runtime, which would wait for the dying thread).
            let asked = self.urgent_asked.load(Ordering::Acquire);
            let urgent = asked > self.urgent_done.load(Ordering::Acquire);
            self.drain_cpu(&mut st);
            if wall && !urgent {
                self.wall_tick(&mut st);
            }
            if urgent || last_flush.elapsed() >= WALL_FLUSH {
                self.flush_wall(&mut st);
                self.emit_stats();
                last_flush = Instant::now();
            }
            if urgent {
                self.urgent_done.store(asked, Ordering::Release);
            }
        }
        // Last round: stop the timers, drain what they recorded, write everything pending.
        for s in slot::slots() {
            if s.state.load(Ordering::Acquire) == slot::ACTIVE {
                self.retire(s);
            }
        }
        self.emit_mappings(&mut st);
        self.drain_cpu(&mut st);
        self.flush_wall(&mut st);
        self.emit_stats();
    }

    /// Publishes the executable mappings to the signal handler (frame records are checked
    /// against them).
    fn publish_exec_ranges(&self, ranges: &[(u64, u64)]) {
        let Ok(mut g) = self.native_rules.lock() else { return };
        for &(a, b) in ranges {
            if !g.full_exec && !codes::add_exec_range(a, b) {
                g.full_exec = true;
                log_warn!(
                    "sampler: over {} executable mappings; frame records into later ones are not checked",
                    codes::MAX_EXEC_RANGES
                );
            }
        }
    }

    fn emit_mappings(&self, st: &mut LoopState) {
        let ts = self.now();
        let fresh = st.maps.new_mappings();
        self.publish_exec_ranges(st.maps.exec_ranges());
        for m in fresh {
            self.add_native_rules(&m);
            let build_id = st.maps.build_id(&m.path);
            self.emit(NativeMapping {
                ts,
                start: m.start,
                end: m.end,
                file_offset: m.file_offset,
                path: m.path,
                build_id,
            });
        }
    }

    /// Publishes the unwind rules of a native code mapping to the signal handler (its file's
    /// `.eh_frame`, read once per file; kept for the process's life).
    fn add_native_rules(&self, m: &native::Mapping) {
        if m.path.ends_with(".dll") || m.path.ends_with(".exe") {
            return;
        }
        let Ok(mut g) = self.native_rules.lock() else { return };
        let st = &mut *g;
        if st.full || !st.published.insert((m.start, m.end)) {
            return;
        }
        let file = match st.files.entry(m.path.clone()) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                let t = Instant::now();
                let read = cfi::of_file_cached(&m.path, self.cache_dir.as_deref());
                st.read_ns += t.elapsed().as_nanos() as u64;
                match &read {
                    Some((_, true)) => st.from_cache += 1,
                    Some((_, false)) => st.parsed += 1,
                    None => {}
                }
                e.insert(read.map(|(f, _)| {
                    let rows: &'static [u64] = Box::leak(f.rows);
                    (rows, f.segments)
                }))
            }
        }
        .as_ref();
        let Some((rows, segments)) = file else { return };
        let rules = cfi::FileRules { rows: Box::new([]), segments: segments.clone() };
        let Some(vaddr) = rules.vaddr_of(m.file_offset, m.end - m.start) else { return };
        let Some(bias) = m.start.checked_sub(vaddr) else { return };
        let r: &'static codes::NativeRules = Box::leak(Box::new(codes::NativeRules { bias, rows }));
        if !codes::add_native_code(m.start, m.end, r) {
            st.full = true;
            let max = codes::MAX_NATIVE_RANGES;
            log_warn!("sampler: over {max} native code mappings; later ones are walked by frame pointers only");
        }
    }

    fn emit_stats(&self) {
        let s = &self.stats;
        let cpu_dropped = slot::slots().map(|s| s.dropped.load(Ordering::Relaxed)).sum();
        self.emit(SamplerStats {
            ts: self.now(),
            cpu_samples: s.cpu_samples.load(Ordering::Relaxed),
            cpu_dropped,
            wall_ticks: s.wall_ticks.load(Ordering::Relaxed),
            walks: s.walks.load(Ordering::Relaxed),
            suspend_failures: s.suspend_failures.load(Ordering::Relaxed),
            walk_failures: s.walk_failures.load(Ordering::Relaxed),
            timer_failures: s.timer_failures.load(Ordering::Relaxed),
            threads: s.threads.load(Ordering::Relaxed),
            suspended_ns: s.suspended_ns.load(Ordering::Relaxed),
            sampler_cpu_ns: os::own_cpu_ns(),
        });
    }

    /// Interned id of a stack, writing its definition the first time.
    fn intern(&self, st: &mut LoopState, ips: &[u64], functions: &[u64]) -> u32 {
        self.intern_activity(st, ips, functions, 0)
    }

    /// Interned id of a stack taken while the thread did `activity` in the runtime.
    fn intern_activity(&self, st: &mut LoopState, ips: &[u64], functions: &[u64], activity: u64) -> u32 {
        if let Some(&id) = st.stacks.get(&(ips.to_vec(), functions.to_vec(), activity)) {
            return id;
        }
        if st.stacks.len() >= MAX_INTERNED {
            st.stacks.clear();
            st.activity_stacks.clear();
        }
        let id = st.next_stack;
        st.next_stack = st.next_stack.wrapping_add(1);
        st.stacks.insert((ips.to_vec(), functions.to_vec(), activity), id);
        self.emit(SampleStack { id, ips: ips.to_vec(), functions: functions.to_vec(), activity });
        if activity != 0 {
            let (ips, functions) = managed_part(ips, functions);
            let managed = self.intern(st, &ips, &functions);
            st.activity_stacks.insert(id, managed);
        }
        id
    }

    fn drain_cpu(&self, st: &mut LoopState) {
        let ts = self.now();
        let mut batch: Vec<(Vec<u64>, u64, u64, u32)> = Vec::new();
        for slot in slot::slots() {
            let state = slot.state.load(Ordering::Acquire);
            if state == slot::FREE {
                continue;
            }
            let key = SlotKey::of(slot);
            batch.clear();
            slot.drain(|ips, sp_top, activity, seq| batch.push((ips.to_vec(), sp_top, activity, seq)));
            let ths = st.threads.entry(key).or_insert_with(|| ThreadState::new(slot));
            if !batch.is_empty() {
                let cpu_now = if state == slot::DEAD {
                    slot.final_cpu_ns.load(Ordering::Relaxed)
                } else {
                    slot.cpu_ns().unwrap_or(0)
                };
                let delta = cpu_now.saturating_sub(ths.cpu_accounted);
                ths.cpu_accounted = ths.cpu_accounted.max(cpu_now);
                let mut counts: Vec<(u32, u32)> = Vec::new();
                for (ips, sp_top, activity, seq) in &mut batch {
                    if let Some(&leaf) = ips.first() {
                        if !st.unknown_leaf
                            && !st.maps.is_native(leaf)
                            && !st.maps.is_managed_image(leaf)
                            && st.function_at(leaf).is_none()
                        {
                            st.unknown_leaf = !st.maps.exec_known(leaf);
                        }
                    }
                    self.find_precompiled(st, ips);
                    let mut fns = self.managed_functions(st, ips);
                    self.add_frameless_caller(st, ips, &mut fns, *sp_top);
                    let activity = self.activity_in_progress(st, key, slot, ips, *activity, *seq);
                    let id = self.intern_activity(st, ips, &fns, activity);
                    if activity != 0 {
                        if let Some(ths) = st.threads.get_mut(&key) {
                            // Kept for wall time charged to this stack (`cpu_stack_now`).
                            ths.last_cpu_activity = Some((id, activity, ips.clone(), fns.clone()));
                        }
                    }
                    match counts.iter_mut().find(|(s, _)| *s == id) {
                        Some(c) => c.1 += 1,
                        None => counts.push((id, 1)),
                    }
                }
                let n = batch.len() as u64;
                self.stats.cpu_samples.fetch_add(n, Ordering::Relaxed);
                let mut left = delta;
                let k = counts.len();
                for (i, (stack, count)) in counts.iter().enumerate() {
                    let w = if i + 1 == k { left } else { delta * *count as u64 / n };
                    left -= w;
                    self.emit(CpuSample { ts, os_tid: key.os_tid, stack: *stack, count: *count, cpu_ns: w });
                }
                if let Some(ths) = st.threads.get_mut(&key) {
                    ths.last_cpu_stack = counts.last().map(|c| c.0);
                    ths.cpu_batches += 1;
                }
            }
            if state == slot::DEAD {
                let died = match slot.died_ns.load(Ordering::Relaxed) {
                    0 => self.now(),
                    t => t,
                };
                let runq = Some(slot.final_runq_ns.load(Ordering::Relaxed)).filter(|&q| q != u64::MAX);
                self.settle(st, key, died, slot.final_cpu_ns.load(Ordering::Relaxed), runq);
                self.flush_thread(st, key);
                slot.registered_ns.store(0, Ordering::Relaxed);
                slot.died_ns.store(0, Ordering::Relaxed);
                st.threads.remove(&key);
                st.stat_files.forget(key.os_tid);
                slot::release(slot);
            }
        }
    }

    /// The activity a CPU sample carries, or 0 when that work was over when the sample was taken.
    /// Work that never runs managed code (a JIT compilation, a type load, a ReadyToRun lookup)
    /// cannot be in progress while the thread's leaf is managed code: such an entry whose end
    /// callback never came is discarded on the thread (`Slot::discard_activities`), with every
    /// entry begun before it, and later samples that still carry it (taken before the thread saw
    /// the discard) lose it too.
    fn activity_in_progress(
        &self,
        st: &mut LoopState,
        key: SlotKey,
        slot: &slot::Slot,
        ips: &[u64],
        activity: u64,
        seq: u32,
    ) -> u64 {
        if activity == 0 || !crate::activity::native_only(activity) || seq == 0 {
            return activity;
        }
        let managed_leaf = ips.first().is_some_and(|&ip| st.function_at(ip).is_some() || st.maps.is_managed_image(ip));
        let Some(t) = st.threads.get_mut(&key) else { return activity };
        if seq <= t.discarded_activity {
            return 0;
        }
        if managed_leaf {
            t.discarded_activity = seq;
            slot.discard_activities(seq);
            return 0;
        }
        activity
    }

    /// The stack that wall time of a thread goes to when no walk tells (its running time, and
    /// blocked time not walked): its latest CPU sample's. An activity is charged only while the
    /// thread still does it: when that sample was taken during runtime work that is over at this
    /// tick (a JIT compilation whose thread then waited for more work), the runtime's frames of
    /// that work are not where the time went: only the managed frames stay (none on a thread
    /// without any). Not the work in progress now with those frames: its callers may differ (the
    /// compilation of a method called from the one compiled before).
    fn cpu_stack_now(&self, st: &mut LoopState, key: SlotKey) -> Option<u32> {
        let t = st.threads.get(&key)?;
        let s = t.last_cpu_stack?;
        let Some((_, activity, ips, fns)) = t.last_cpu_activity.as_ref().filter(|a| a.0 == s) else { return Some(s) };
        if *activity == t.activity_now {
            return Some(s);
        }
        let (ips, fns) = managed_part(ips, fns);
        Some(self.intern(st, &ips, &fns))
    }

    /// FunctionIDs of the managed frames of a CPU sample, from the map of managed code (return
    /// addresses are looked up one byte earlier, at the call). Empty when no frame is managed.
    fn managed_functions(&self, st: &LoopState, ips: &[u64]) -> Vec<u64> {
        let mut out = Vec::with_capacity(ips.len());
        let mut any = false;
        for (i, &ip) in ips.iter().enumerate() {
            let at = if i > 0 { ip.saturating_sub(1) } else { ip };
            let f = st.function_at(at).unwrap_or(0);
            any |= f != 0;
            out.push(f);
        }
        if !any {
            out.clear();
        }
        out
    }

    /// A leaf without a frame (tier-1 leaf methods, native leaves, prologues) leaves the frame
    /// pointer at its caller's frame, so the walk misses the caller; the return address is then
    /// the word at SP. It is inserted when it is a call site in managed code other than the next
    /// frame, and not when the leaf is managed code with its RBP frame set up: past its prolog
    /// and not at a `ret`, the walk found its caller through RBP, and the word at SP is one of
    /// its own (often a return address left from an earlier call: a wrong caller).
    fn add_frameless_caller(&self, st: &mut LoopState, ips: &mut Vec<u64>, fns: &mut Vec<u64>, sp_top: u64) {
        if sp_top < 4096 || ips.is_empty() {
            return;
        }
        let f = match st.function_at(sp_top - 1) {
            Some(f) => {
                if fns.first() == Some(&f) || fns.get(1) == Some(&f) {
                    return;
                }
                f
            }
            None => {
                // Code that can unload: not in the map (named by the reader from its code
                // ranges, as the other frames in it); the same checks by address range.
                let Ok(d) = self.dynamic_code.lock() else { return };
                let Some((&a, &end)) = d.ranges.range(..sp_top).next_back() else { return };
                let within = |ip: u64| ip >= a && ip < end;
                if sp_top > end || within(ips[0]) || ips.get(1).is_some_and(|&r| within(r.wrapping_sub(1))) {
                    return;
                }
                0
            }
        };
        if st.rbp_frame_set_up(ips[0]) {
            return;
        }
        if fns.is_empty() {
            fns.resize(ips.len(), 0);
        }
        ips.insert(1, sp_top);
        fns.insert(1, f);
    }

    /// Blocked time of a thread that needs a walk but is not walked at this tick (suspensions are
    /// rate-limited): it waits for the walk. A thread needs one when it ran since its last tick, so
    /// the stack it had before is not known to hold it any more (a thread that woke up and blocked
    /// again elsewhere would have its new blocked time charged to the old place until the walk).
    fn defer_walk(&self, st: &mut LoopState, key: SlotKey, blocked: u64) {
        let Some(t) = st.threads.get_mut(&key) else { return };
        t.unwalked_ns += blocked;
        t.unwalked_ticks += 1;
    }

    /// Charges time the thread spent running to its running stack: its latest CPU sample, when
    /// one was taken since the thread was last seen blocked; otherwise the time waits for the next
    /// stack known (the sample from before the block is not where it runs now).
    fn charge_running(&self, st: &mut LoopState, key: SlotKey, ns: u64, ticks: u32) {
        let Some(t) = st.threads.get_mut(&key) else { return };
        let fresh = t.cpu_batches != t.cpu_batches_when_blocked;
        let stack = if fresh { self.cpu_stack_now(st, key) } else { None };
        let Some(t) = st.threads.get_mut(&key) else { return };
        match stack {
            Some(s) => self.add_wall(st, key, s, ns, ticks),
            None => {
                t.carry_ns += ns;
                t.carry_ticks += ticks;
            }
        }
    }

    /// A thread is gone (or the sampler stops): charges the time from its last tick to `until`
    /// without a walk, then everything still waiting for a stack to its last known stack (an empty
    /// one when none is known), so its wall time adds up to its lifetime.
    fn settle(&self, st: &mut LoopState, key: SlotKey, until: u64, cpu_now: u64, runq_now: Option<u64>) {
        let Some(t) = st.threads.get_mut(&key) else { return };
        if let Some(last_ts) = t.wall_ts.take() {
            let elapsed = until.saturating_sub(last_ts);
            let dcpu = cpu_now.saturating_sub(t.wall_cpu).min(elapsed);
            match t.wall_stack {
                Some(b) => {
                    // What it ran and waited for a CPU after it woke up is not the wait's.
                    let waited = match (t.block_runq, runq_now) {
                        (Some(q0), Some(q)) => q.saturating_sub(q0),
                        _ => 0,
                    };
                    let blocked = (elapsed - dcpu).saturating_sub(waited);
                    self.add_wall(st, key, b, blocked, 0);
                    self.charge_running(st, key, elapsed - blocked, 0);
                }
                None => self.charge_running(st, key, elapsed, 0),
            }
        }
        let Some(t) = st.threads.get_mut(&key) else { return };
        let (ns, ticks) = (std::mem::take(&mut t.unwalked_ns), std::mem::take(&mut t.unwalked_ticks));
        if ns + t.carry_ns == 0 && ticks + t.carry_ticks == 0 {
            return;
        }
        // The thread is gone: whatever runtime work its last sample showed is over.
        t.activity_now = 0;
        let walked = t.wall_stack;
        let s = match walked.or_else(|| self.cpu_stack_now(st, key)) {
            Some(s) => s,
            None => self.intern(st, &[], &[]),
        };
        self.add_wall(st, key, s, ns, ticks);
    }

    /// Adds `ns` (and `ticks` wall ticks) to the thread's pending wall sample of `stack`, with the
    /// time carried from earlier ticks whose stack was not known.
    fn add_wall(&self, st: &mut LoopState, key: SlotKey, stack: u32, ns: u64, ticks: u32) {
        // Carried time passed before this stack's runtime work began (or at least is not known
        // to lie in it): it goes to the stack's managed frames.
        if let Some(&managed) = st.activity_stacks.get(&stack) {
            if st.threads.get(&key).is_some_and(|t| t.carry_ns + t.carry_ticks as u64 > 0) {
                self.add_wall(st, key, managed, 0, 0);
            }
        }
        let Some(t) = st.threads.get_mut(&key) else { return };
        let ns = ns + std::mem::take(&mut t.carry_ns);
        let ticks = ticks + std::mem::take(&mut t.carry_ticks);
        if ns == 0 && ticks == 0 {
            return;
        }
        match &mut t.pending {
            Some(p) if p.0 == stack => {
                p.1 += ticks;
                p.2 += ns;
                return;
            }
            _ => {}
        }
        let old = t.pending.replace((stack, ticks, ns));
        if let Some((s, c, w)) = old {
            self.emit(WallSample { ts: self.now(), os_tid: key.os_tid, stack: s, count: c, wall_ns: w });
        }
    }

    fn flush_thread(&self, st: &mut LoopState, key: SlotKey) {
        if let Some((s, c, w)) = st.threads.get_mut(&key).and_then(|t| t.pending.take()) {
            self.emit(WallSample { ts: self.now(), os_tid: key.os_tid, stack: s, count: c, wall_ns: w });
        }
    }

    fn flush_wall(&self, st: &mut LoopState) {
        let keys: Vec<SlotKey> = st.threads.keys().copied().collect();
        for k in keys {
            self.flush_thread(st, k);
        }
    }

    fn wall_tick(&self, st: &mut LoopState) {
        self.stats.wall_ticks.fetch_add(1, Ordering::Relaxed);
        let now = self.now();
        let mut to_walk: Vec<(SlotKey, ThreadID, u64)> = Vec::new();
        // At most MAX_THREADS_PER_TICK threads per tick, round robin: with many threads each is
        // looked at every few ticks, and its sample stands for the time since it was last seen.
        let all: Vec<&slot::Slot> = slot::slots().filter(|s| s.state.load(Ordering::Acquire) == slot::ACTIVE).collect();
        let n = all.len();
        let take = n.min(MAX_THREADS_PER_TICK);
        let first = if n == 0 { 0 } else { st.wall_cursor % n };
        st.wall_cursor = first + take;
        for slot in (0..take).map(|i| all[(first + i) % n]) {
            let key = SlotKey::of(slot);
            if slot.died_ns.load(Ordering::Acquire) != 0 {
                continue; // dying: settled up to its death when its slot is drained
            }
            let Some(cpu) = slot.cpu_ns() else { continue };
            let t = st.threads.entry(key).or_insert_with(|| ThreadState::new(slot));
            t.activity_now = slot.activity();
            let Some(last_ts) = t.wall_ts.replace(now) else {
                t.wall_cpu = cpu;
                continue;
            };
            let elapsed = now.saturating_sub(last_ts);
            // It cannot have run longer than the interval (the clocks are read a little apart).
            let dcpu = cpu.saturating_sub(t.wall_cpu).min(elapsed);
            t.wall_cpu = cpu;
            if dcpu == 0 {
                if let Some(s) = t.wall_stack {
                    self.add_wall(st, key, s, elapsed, 1);
                    continue;
                }
            }
            // Running (or waiting for a CPU), or blocked again? The thread's scheduler state
            // tells (a file read, so only for threads that ran for 2 % of the interval or more,
            // or whose blocked stack is not known: a runnable thread may not have run at all
            // this interval).
            if (dcpu * 50 >= elapsed || t.wall_stack.is_none())
                && st.stat_files.runnable(key.os_tid).unwrap_or(dcpu * 2 >= elapsed)
            {
                // Waiting for a CPU is not blocking. At the second tick of a running stretch the
                // thread's CPU time and run-queue wait are noted (one file read per stretch;
                // threads that wake up for a moment never get there): when it blocks, the time
                // since then that it neither ran nor waited for a CPU is its blocked time.
                let was_running = t.wall_stack.is_none() && t.unwalked_ticks == 0;
                let q_now = st.stat_files.runq_wait_ns(key.os_tid);
                let Some(t) = st.threads.get_mut(&key) else { continue };
                if !was_running {
                    t.stretch = None;
                } else if t.stretch.is_none() {
                    t.stretch = q_now.map(|q| (now, cpu, q));
                }
                t.tick_runq = q_now;
                // It runs. If it was blocked, it woke up in this interval: the part it neither ran
                // nor waited for a CPU (its run-queue wait since it blocked, from `schedstat`)
                // stays where it was blocked; from its wake-up on, the time is its running stack's.
                let running = match t.wall_stack.take() {
                    Some(b) => {
                        let q0 = t.block_runq.take();
                        let waited = match (q0, q_now) {
                            (Some(q0), Some(q)) => q.saturating_sub(q0),
                            _ => 0,
                        };
                        let blocked = (elapsed - dcpu).saturating_sub(waited);
                        self.add_wall(st, key, b, blocked, 0);
                        elapsed - blocked
                    }
                    None => elapsed,
                };
                // Blocked time never walked (it blocked and woke up between two suspensions)
                // goes with the stack it ran before it blocked, as nothing better is known.
                let unwalked = st
                    .threads
                    .get_mut(&key)
                    .filter(|t| t.unwalked_ticks > 0)
                    .map(|t| (std::mem::take(&mut t.unwalked_ns), std::mem::take(&mut t.unwalked_ticks)));
                if let Some((ns, ticks)) = unwalked {
                    match self.cpu_stack_now(st, key) {
                        Some(s) => self.add_wall(st, key, s, ns, ticks),
                        None => {
                            if let Some(t) = st.threads.get_mut(&key) {
                                t.carry_ns += ns;
                                t.carry_ticks += ticks;
                            }
                        }
                    }
                }
                self.charge_running(st, key, running, 1);
                continue;
            }
            // Blocked. A thread that was running at its last tick ran `dcpu` of the interval on
            // its running stack (and may have waited for a CPU) and has been blocked since: only
            // the rest is blocked time. Over its running stretch, the time it neither ran nor
            // waited for a CPU was blocked time (at most the interval's, as short waits in the
            // stretch would count too).
            // Its run-queue wait now: the time it waits for a CPU after it wakes is not blocked
            // time (a blocked thread's wait does not grow).
            let q = st.stat_files.runq_wait_ns(key.os_tid);
            let Some(t) = st.threads.get_mut(&key) else { continue };
            let blocked = if t.wall_stack.is_none() {
                // Nor is the time it waited for a CPU since the last tick before it blocked.
                let waited = match (t.tick_runq, q) {
                    (Some(q0), Some(q)) => q.saturating_sub(q0),
                    _ => 0,
                };
                let mut blocked = (elapsed - dcpu).saturating_sub(waited);
                if let (Some((since, cpu0, q0)), Some(q)) = (t.stretch.take(), q) {
                    let not_blocked = cpu.saturating_sub(cpu0) + q.saturating_sub(q0);
                    blocked = blocked.min(now.saturating_sub(since).saturating_sub(not_blocked));
                }
                self.charge_running(st, key, elapsed - blocked, 0);
                blocked
            } else {
                // Blocked at its last tick, and it ran since (a thread that did not run keeps its
                // stack above): it woke up and blocked again, maybe elsewhere. Its old stack is
                // no longer known to hold it, so it gets none of this time; what it neither ran
                // nor waited for a CPU waits for the walk that tells where it blocks now.
                t.wall_stack = None;
                let waited = match (t.block_runq, q) {
                    (Some(q0), Some(q)) => q.saturating_sub(q0),
                    _ => 0,
                };
                let ran = (dcpu + waited).min(elapsed);
                self.charge_running(st, key, ran, 0);
                elapsed - ran
            };
            let Some(t) = st.threads.get_mut(&key) else { continue };
            t.block_runq = q;
            t.tick_runq = q;
            t.cpu_batches_when_blocked = t.cpu_batches;
            let tid = slot.thread_id.load(Ordering::Relaxed);
            to_walk.push((key, tid, blocked));
        }
        if to_walk.is_empty() {
            return;
        }
        // Suspensions stop every thread: at most one per MIN_SUSPEND_INTERVAL. Until the next
        // one, threads keep their last known stack.
        if st.last_suspend.is_some_and(|t| t.elapsed() < MIN_SUSPEND_INTERVAL) {
            for (key, _, blocked) in to_walk {
                self.defer_walk(st, key, blocked);
            }
            return;
        }
        st.last_suspend = Some(Instant::now());
        // Walk at most MAX_WALKS_PER_SUSPEND threads, those whose stack is oldest (never walked
        // first); the others keep their last known stack until their turn.
        if to_walk.len() > MAX_WALKS_PER_SUSPEND {
            to_walk.sort_by_key(|(k, _, _)| st.threads.get(k).map(|t| t.walked_at.unwrap_or(0)).unwrap_or(0));
            for (key, _, blocked) in to_walk.split_off(MAX_WALKS_PER_SUSPEND) {
                self.defer_walk(st, key, blocked);
            }
        }
        for (key, _, _) in &to_walk {
            if let Some(t) = st.threads.get_mut(key) {
                t.walked_at = Some(now);
            }
        }
        let result = {
            let _g = self.walk_lock.lock();
            // Only threads still alive (ThreadDestroyed retires slots under the same lock).
            let alive: Vec<bool> = to_walk
                .iter()
                .map(|(k, tid, _)| {
                    slot::slots().any(|s| {
                        SlotKey::of(s) == *k
                            && s.state.load(Ordering::Acquire) == slot::ACTIVE
                            && s.thread_id.load(Ordering::Relaxed) == *tid
                    })
                })
                .collect();
            let ids: Vec<ThreadID> = to_walk.iter().zip(&alive).filter(|(_, a)| **a).map(|((_, t, _), _)| *t).collect();
            let r = wall::walk_suspended(&self.info, &ids);
            r.map(|r| (r, alive))
        };
        match result {
            Ok((r, alive)) => {
                self.stats.suspended_ns.fetch_add(r.suspended_ns, Ordering::Relaxed);
                if let Some(e) = r.first_error {
                    if self.stats.walk_failures.load(Ordering::Relaxed) == 0 {
                        log_warn!("sampler: {e} (walk failures are counted in SamplerStats)");
                    }
                }
                let mut stacks = r.stacks.into_iter();
                for ((key, _, blocked), a) in to_walk.into_iter().zip(alive) {
                    if !a {
                        // Gone: its time is settled when its slot is drained.
                        self.defer_walk(st, key, blocked);
                        continue;
                    }
                    self.stats.walks.fetch_add(1, Ordering::Relaxed);
                    match stacks.next().flatten() {
                        Some(frames) => {
                            self.name_walked(st, &frames);
                            let ips: Vec<u64> = frames.iter().map(|f| f.1).collect();
                            let fns: Vec<u64> = frames.iter().map(|f| f.0).collect();
                            let id = self.intern(st, &ips, &fns);
                            self.walked(st, key, id, blocked);
                        }
                        None => {
                            self.stats.walk_failures.fetch_add(1, Ordering::Relaxed);
                            self.wall_fallback(st, key, blocked);
                        }
                    }
                }
            }
            Err(e) => {
                let n = self.stats.suspend_failures.fetch_add(1, Ordering::Relaxed);
                if n == 0 {
                    log_warn!("sampler: {e}; tick skipped (counted in SamplerStats)");
                }
                for (key, _, blocked) in to_walk {
                    self.wall_fallback(st, key, blocked);
                }
            }
        }
    }

    /// A thread could not be walked: its last known stack stands in, else an empty stack; it is
    /// kept as the thread's blocked stack so an idle thread is not walked again at every tick.
    fn wall_fallback(&self, st: &mut LoopState, key: SlotKey, blocked: u64) {
        let s = st.threads.get(&key).and_then(|t| t.wall_stack).or_else(|| self.cpu_stack_now(st, key));
        let s = match s {
            Some(s) => s,
            None => self.intern(st, &[], &[]),
        };
        self.walked(st, key, s, blocked);
    }

    /// The thread is blocked at `stack` (walked, or the fallback): it gets this tick's blocked
    /// time and the blocked time that waited for the walk.
    fn walked(&self, st: &mut LoopState, key: SlotKey, stack: u32, blocked: u64) {
        let Some(t) = st.threads.get_mut(&key) else { return };
        t.wall_stack = Some(stack);
        let (ns, ticks) = (std::mem::take(&mut t.unwalked_ns), std::mem::take(&mut t.unwalked_ticks));
        self.add_wall(st, key, stack, blocked + ns, 1 + ticks);
    }
}

/// A sampled stack cut to its managed frames: from the first frame with a FunctionID on (nothing
/// when it has none).
fn managed_part(ips: &[u64], functions: &[u64]) -> (Vec<u64>, Vec<u64>) {
    match functions.iter().position(|&f| f != 0) {
        Some(i) => (ips[i..].to_vec(), functions[i..].to_vec()),
        None => (Vec::new(), Vec::new()),
    }
}

/// The non-empty code ranges (start, size) of the code version that starts at `start`.
fn code_ranges(info: &ProfilerInfo, start: usize) -> Vec<(u64, u64)> {
    let ranges = info.get_code_info4(start).unwrap_or_default();
    ranges
        .iter()
        .filter(|r| r.start_address != 0 && r.size != 0)
        .map(|r| (r.start_address as u64, r.size as u64))
        .collect()
}

/// Identifies one registration of a thread (slots are reused).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct SlotKey {
    slot: usize,
    os_tid: u32,
    thread_id: usize,
}

impl SlotKey {
    fn of(s: &slot::Slot) -> SlotKey {
        SlotKey {
            slot: s as *const slot::Slot as usize,
            os_tid: s.os_tid.load(Ordering::Relaxed),
            thread_id: s.thread_id.load(Ordering::Relaxed),
        }
    }
}

/// The sampler thread's view of one thread.
struct ThreadState {
    /// CPU time already given to samples.
    cpu_accounted: u64,
    last_cpu_stack: Option<u32>,
    /// The latest CPU stack taken during runtime work: its id, the activity, its IPs and
    /// FunctionIDs. Wall time goes elsewhere once that work is over ([`Sampler::cpu_stack_now`]).
    last_cpu_activity: Option<(u32, u64, Vec<u64>, Vec<u64>)>,
    /// The thread's runtime activity when the wall sampler last looked.
    activity_now: u64,
    /// Activities begun at or before this sequence number are over ([`Sampler::activity_in_progress`]).
    discarded_activity: u32,
    wall_ts: Option<u64>,
    wall_cpu: u64,
    /// Where the thread was blocked at its last walk.
    wall_stack: Option<u32>,
    /// Wall samples not yet written: (stack, count, ns).
    pending: Option<(u32, u32, u64)>,
    /// Wall time (and ticks) not yet given to a stack (no running stack known yet).
    carry_ns: u64,
    carry_ticks: u32,
    /// Blocked time (and ticks) waiting for the thread's walk: it blocked after running, and the
    /// walk that tells where was rate-limited.
    unwalked_ns: u64,
    unwalked_ticks: u32,
    /// Batches of CPU samples drained so far, and how many when the thread was last seen
    /// blocked: equal means its latest CPU sample is from before it blocked.
    cpu_batches: u64,
    cpu_batches_when_blocked: u64,
    /// Start of the thread's running stretch (its second tick running): (time, CPU time, run-queue
    /// wait from `schedstat`).
    stretch: Option<(u64, u64, u64)>,
    /// When the thread was last walked.
    walked_at: Option<u64>,
    /// Its run-queue wait (`schedstat`) when it was last seen blocked: at its wake-up, what it
    /// waited for a CPU since is no blocked time.
    block_runq: Option<u64>,
    /// Its run-queue wait at its last tick, when read (threads running or needing a walk).
    tick_runq: Option<u64>,
}

impl ThreadState {
    fn new(slot: &slot::Slot) -> ThreadState {
        // Wall time starts at the thread's registration (when it is known already; otherwise at
        // the first tick that sees the thread).
        let registered = slot.registered_ns.load(Ordering::Acquire);
        ThreadState {
            cpu_accounted: slot.start_cpu_ns.load(Ordering::Relaxed),
            last_cpu_stack: None,
            last_cpu_activity: None,
            activity_now: 0,
            discarded_activity: 0,
            wall_ts: (registered != 0).then_some(registered),
            wall_cpu: slot.start_cpu_ns.load(Ordering::Relaxed),
            wall_stack: None,
            pending: None,
            carry_ns: 0,
            carry_ticks: 0,
            unwalked_ns: 0,
            unwalked_ticks: 0,
            cpu_batches: 0,
            cpu_batches_when_blocked: u64::MAX,
            stretch: None,
            walked_at: None,
            block_runq: None,
            tick_runq: None,
        }
    }
}

impl LoopState {
    /// The managed function whose code contains `ip`.
    fn function_at(&self, ip: u64) -> Option<u64> {
        let (_, &(end, id)) = self.code.range(..=ip).next_back()?;
        (ip < end).then_some(id)
    }

    /// True when `ip` lies in managed code with an RBP frame (`push rbp` first) past the prolog
    /// that sets RBP up, and not at a `ret`: RBP is then that code's own frame pointer. The
    /// prolog's length is read once per code range.
    fn rbp_frame_set_up(&mut self, ip: u64) -> bool {
        let Some((&start, &(end, _))) = self.code.range(..=ip).next_back() else { return false };
        if ip >= end {
            return false;
        }
        let prolog = *self.rbp_prologs.entry(start).or_insert_with(|| {
            let mut b = [0u8; prolog::PROLOG_BYTES];
            let len = ((end - start) as usize).min(prolog::PROLOG_BYTES);
            os::read_own_memory(start, &mut b[..len]).then(|| prolog::rbp_prolog(&b[..len])).flatten()
        });
        let Some(n) = prolog else { return false };
        let mut at = [0u8; 1];
        ip >= start + n as u64 && os::read_own_memory(ip, &mut at) && at[0] != 0xC3
    }
}

#[derive(Default)]
struct LoopState {
    stacks: HashMap<(Vec<u64>, Vec<u64>, u64), u32>,
    /// Stacks taken during runtime work, each with the same stack cut to its managed frames: wall
    /// time from before that work (carried until a stack was known) goes to the latter.
    activity_stacks: HashMap<u32, u32>,
    /// Attach: the functions the agent has reported (compiled, found precompiled, or there
    /// before the attach), so that a walked frame's function is reported once.
    known_functions: std::collections::HashSet<u64>,
    next_stack: u32,
    maps: native::MapTracker,
    threads: HashMap<SlotKey, ThreadState>,
    /// Managed code: start → (end, FunctionID), every code version.
    code: std::collections::BTreeMap<u64, (u64, u64)>,
    code_starts: std::collections::HashSet<u64>,
    /// Attach: sampled addresses in managed images that are no function's code.
    not_code: std::collections::HashSet<u64>,
    /// The handler's table of OSR code ranges filled up (said once in the log).
    osr_full: bool,
    /// Code range start → the length of its RBP frame's prolog (None: no RBP frame recognized).
    rbp_prologs: HashMap<u64, Option<u32>>,
    /// Functions whose code versions are still looked up: (id, lookups so far).
    code_pending: Vec<(FunctionID, u32)>,
    last_suspend: Option<Instant>,
    stat_files: os::StatFiles,
    /// Where the next wall tick starts in the thread list.
    wall_cursor: usize,
    /// A CPU sample's leaf lay outside every executable mapping known: the mappings are read
    /// again soon.
    unknown_leaf: bool,
}
