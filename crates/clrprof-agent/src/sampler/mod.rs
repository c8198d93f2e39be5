//! The sampling profiler (Monte Carlo): CPU time from per-thread CPU-time timers ([`cpu`]), wall
//! time with exact managed stacks from suspended `DoStackSnapshot` walks ([`wall`]), native module
//! mappings for naming native IPs later ([`native`], with each file's [`build_id`]).
//!
//! By concern: the signal handler and the timers are [`cpu`]; the per-thread slots, their rings
//! and the calling thread's runtime activities [`slot`]; the walk the handler takes `unwind`, over
//! the code tables it reads ([`codes`]) and the native unwind rules ([`cfi`]). On the sampler
//! thread: x86-64 prolog decoding ([`prolog`]), what it publishes to the code tables (`publish`),
//! wall-time accounting (`wall_time`), and this module — the thread, its loop, CPU samples.
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

pub(crate) mod build_id;
pub(crate) mod cfi;
pub(crate) mod codes;
pub(crate) mod cpu;
mod ilmap;
pub(crate) mod native;
pub(crate) mod prolog;
mod publish;
pub(crate) mod sigframe;
pub(crate) mod slot;
#[cfg(test)]
mod tests;
mod unwind;
pub(crate) mod wall;
mod wall_time;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use clrprof_sys::{FunctionID, ProfilerInfo, ThreadID};
use clrprof_trace::{CodeRange, CpuSample, Record, SampleStack, SamplerStats, SamplingStart};

use crate::os;
use crate::writer::Writer;
use crate::{log_info, log_warn};

/// Highest wall-clock tick rate (each tick reads every thread's CPU clock).
pub(crate) const MAX_WALL_HZ: u32 = 250;
/// Stacks interned before the table is reset (ids are then redefined).
const MAX_INTERNED: usize = 200_000;
/// EventSource activity ids interned before the table is reset (indexes are then redefined).
const MAX_FLOWS: usize = 1 << 20;
/// Shortest time between two runtime suspensions of the wall sampler.
const MIN_SUSPEND_INTERVAL: Duration = Duration::from_millis(100);
/// Most threads a wall tick looks at (each costs a read of the thread's CPU clock).
const MAX_THREADS_PER_TICK: usize = 64;
/// Most threads walked in one suspension (the suspension lasts as long as the walks).
const MAX_WALKS_PER_SUSPEND: usize = 8;
/// Wait sites remembered per thread with their walked stacks.
const MAX_WAIT_SITES: usize = 16;
/// Shortest time between two reads of the process's mappings.
const MIN_MAPS_INTERVAL: Duration = Duration::from_millis(20);
/// Pending wall samples are written at least this often.
const WALL_FLUSH: Duration = Duration::from_secs(1);

#[derive(Default)]
struct Stats {
    cpu_samples: AtomicU64,
    wall_ticks: AtomicU64,
    walks: AtomicU64,
    /// Blocked threads found at a wait site walked before (no walk needed).
    sites_known: AtomicU64,
    suspend_failures: AtomicU64,
    walk_failures: AtomicU64,
    timer_failures: AtomicU64,
    threads: AtomicU64,
    suspended_ns: AtomicU64,
}

/// The sampler: started at `Initialize`, stopped at `Shutdown` before the writer.
pub(crate) struct Sampler {
    info: ProfilerInfo,
    writer: Arc<Writer>,
    start: Instant,
    rate_hz: u32,
    /// The CPU timers' period now: `1 s / rate_hz`, or a collection trigger's while its window
    /// lasts ([`Sampler::set_cpu_rate`]).
    cpu_period_ns: AtomicU64,
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
    /// `attach --count-top`: CPU samples by the FunctionID of their innermost managed frame, kept
    /// by the sampler thread while on ([`Sampler::keep_tally`], [`Sampler::take_tally`]).
    tally_on: AtomicBool,
    tally: Mutex<Tally>,
}

/// Most functions the tally holds: samples of functions past it are counted as left out.
const MAX_TALLIED: usize = 1 << 16;

/// CPU samples by the FunctionID of their innermost managed frame (self samples, not the
/// runtime's work: a sample taken while the thread compiled, loaded or collected is left out).
#[derive(Debug, Default)]
pub(crate) struct Tally {
    pub(crate) samples: HashMap<u64, u64>,
    /// Samples with a managed frame, tallied or not.
    pub(crate) managed: u64,
    /// Samples of functions past [`MAX_TALLIED`].
    pub(crate) left_out: u64,
}

impl Tally {
    fn add(&mut self, functions: &[u64]) {
        for &f in functions {
            self.managed += 1;
            let full = self.samples.len() >= MAX_TALLIED;
            match self.samples.get_mut(&f) {
                Some(n) => *n += 1,
                None if full => self.left_out += 1,
                None => {
                    self.samples.insert(f, 1);
                }
            }
        }
    }
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
    pub(crate) fn new(
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
            cpu_period_ns: AtomicU64::new(1_000_000_000 / rate_hz.clamp(1, 10_000) as u64),
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
            tally_on: AtomicBool::new(false),
            tally: Mutex::new(Tally::default()),
        })
    }

    /// `attach --count-top`: from now on the sampler thread tallies CPU samples by their innermost
    /// managed frame's function.
    pub(crate) fn keep_tally(&self) {
        self.tally_on.store(true, Ordering::Release);
    }

    /// The tally so far, after a last drain of the samples taken (1 s at most); tallying stops.
    pub(crate) fn take_tally(&self) -> Tally {
        self.flush_urgently(Duration::from_secs(1));
        self.tally_on.store(false, Ordering::Release);
        self.tally.lock().map(|mut t| std::mem::take(&mut *t)).unwrap_or_default()
    }

    /// Attach: names sampled addresses in managed images that no code callback reported
    /// (ReadyToRun code loaded before the agent) through `GetFunctionFromIP`, and calls `found`
    /// once for each function found that way.
    pub(crate) fn name_precompiled_code(&self, found: Box<dyn Fn(FunctionID) + Send + Sync>) {
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
                    st.il.add_range(a, id as u64, start as u64);
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

    fn wall_hz(&self) -> u32 {
        self.rate_hz.min(MAX_WALL_HZ)
    }

    /// Installs the signal handler and starts the sampler thread.
    pub(crate) fn start(self: &Arc<Self>) -> std::io::Result<()> {
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
    pub(crate) fn flush_urgently(&self, timeout: Duration) -> bool {
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

    pub(crate) fn stop(&self) {
        if self.stop.swap(true, Ordering::AcqRel) {
            return;
        }
        let h = self.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(h) = h {
            let _ = h.join();
        }
        log_info!(
            "sampler: {} runtime walks; {} times a blocked thread was at a wait site walked before",
            self.stats.walks.load(Ordering::Relaxed),
            self.stats.sites_known.load(Ordering::Relaxed)
        );
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

    /// The run's CPU sampling rate (`CLRPROF_SAMPLE_RATE`).
    pub(crate) fn rate_hz(&self) -> u32 {
        self.rate_hz
    }

    /// Re-arms every live thread's CPU timer at `hz` samples per second of its CPU time (a
    /// collection trigger's window; [`Sampler::rate_hz`] to go back). Samples keep their weight
    /// from the thread's CPU clock, so CPU time stays exact; only their density changes. A thread
    /// registering at the same moment may keep the other rate.
    pub(crate) fn set_cpu_rate(&self, hz: u32) {
        let period = 1_000_000_000 / hz.clamp(1, 10_000) as u64;
        self.cpu_period_ns.store(period, Ordering::Release);
        for s in slot::slots() {
            if s.state.load(Ordering::Acquire) == slot::ACTIVE {
                cpu::rearm(s, period);
            }
        }
    }

    /// `ThreadAssignedToOSThread`, on the thread itself.
    pub(crate) fn thread_assigned(&self, id: ThreadID, os_tid: u32) {
        if self.stop.load(Ordering::Acquire) {
            return;
        }
        let registered = self.now().max(1);
        let (slot, err) = cpu::register_current(os_tid, id, Some(self.cpu_period_ns.load(Ordering::Acquire)));
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

    /// `ThreadDestroyed`: waits for an in-flight walk, then retires the thread's slot.
    pub(crate) fn thread_destroyed(&self, id: ThreadID) {
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
            self.map_pending_code(&mut st);
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
        self.map_stack_code(st, ips);
        // A stack cut at the walk's limit has no managed variant: with the runtime's frames taken
        // off it would be shorter than the limit, and readers would show it as a whole stack.
        if activity != 0 && ips.len() < slot::MAX_FRAMES {
            let (ips, functions) = managed_part(ips, functions);
            let managed = self.intern(st, &ips, &functions);
            st.activity_stacks.insert(id, managed);
        }
        id
    }

    /// The index of an EventSource activity id samples carry, writing its definition the first
    /// time (0 for none).
    fn intern_flow(&self, st: &mut LoopState, flow: u128) -> u32 {
        if flow == 0 {
            return 0;
        }
        if let Some(&i) = st.flows.get(&flow) {
            return i;
        }
        if st.flows.len() >= MAX_FLOWS {
            st.flows.clear();
        }
        let index = st.flows.len() as u32 + 1;
        st.flows.insert(flow, index);
        self.emit(clrprof_trace::SampleActivity { index, id: flow.to_le_bytes().to_vec() });
        index
    }

    fn drain_cpu(&self, st: &mut LoopState) {
        let ts = self.now();
        let mut batch: Vec<(Vec<u64>, u64, u64, u32, u128)> = Vec::new();
        for slot in slot::slots() {
            let state = slot.state.load(Ordering::Acquire);
            // A live thread without new samples needs nothing here (its state is made by the
            // wall tick that looks at it): the pass stays cheap per thread as threads grow.
            if state == slot::FREE || (state == slot::ACTIVE && slot.is_drained()) {
                continue;
            }
            let key = SlotKey::of(slot);
            batch.clear();
            slot.drain(|ips, sp_top, activity, seq, flow| batch.push((ips.to_vec(), sp_top, activity, seq, flow)));
            let ths = st.threads.entry(key).or_insert_with(|| ThreadState::new(slot));
            if !batch.is_empty() {
                let cpu_now = if state == slot::DEAD {
                    slot.final_cpu_ns.load(Ordering::Relaxed)
                } else {
                    slot.cpu_ns().unwrap_or(0)
                };
                let delta = cpu_now.saturating_sub(ths.cpu_accounted);
                ths.cpu_accounted = ths.cpu_accounted.max(cpu_now);
                // (stack, the EventSource activity's index, samples).
                let mut counts: Vec<(u32, u32, u32)> = Vec::new();
                let tally = self.tally_on.load(Ordering::Acquire);
                let mut innermost: Vec<u64> = Vec::new();
                for (ips, sp_top, activity, seq, flow) in &mut batch {
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
                    if tally && activity == 0 {
                        innermost.extend(fns.iter().find(|&&f| f != 0));
                    }
                    let id = self.intern_activity(st, ips, &fns, activity);
                    if activity != 0 {
                        if let Some(ths) = st.threads.get_mut(&key) {
                            // Kept for wall time charged to this stack (`cpu_stack_now`).
                            ths.last_cpu_activity = Some((id, activity, ips.clone(), fns.clone()));
                        }
                    }
                    let flow = self.intern_flow(st, *flow);
                    match counts.iter_mut().find(|(s, f, _)| *s == id && *f == flow) {
                        Some(c) => c.2 += 1,
                        None => counts.push((id, flow, 1)),
                    }
                }
                if !innermost.is_empty() {
                    if let Ok(mut t) = self.tally.lock() {
                        t.add(&innermost);
                    }
                }
                let n = batch.len() as u64;
                self.stats.cpu_samples.fetch_add(n, Ordering::Relaxed);
                let mut left = delta;
                let k = counts.len();
                for (i, &(stack, activity, count)) in counts.iter().enumerate() {
                    let w = if i + 1 == k { left } else { delta * count as u64 / n };
                    left -= w;
                    self.emit(CpuSample { ts, os_tid: key.os_tid, stack, count, cpu_ns: w, activity });
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
    /// Where it waits in the kernel since it was last seen blocking, read then (cleared once a
    /// walk of that block is done).
    block_site: Option<os::WaitSite>,
    /// Wait sites walked before and the stack each was walked at, latest last: a thread that
    /// blocks at one of them again is there again without a walk ([`Sampler::known_site`]).
    wait_sites: Vec<(os::WaitSite, u32)>,
    /// Its OS name was looked at (a thread without managed frames: [`Sampler::name_runtime_thread`]).
    os_name_checked: bool,
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
            block_site: None,
            wait_sites: Vec::new(),
            os_name_checked: false,
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
    /// EventSource activity ids of CPU samples by index (`SampleActivity`).
    flows: HashMap<u128, u32>,
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
    /// Code versions by range, and which have their IL-to-native map in the trace.
    il: ilmap::IlMapState,
    last_suspend: Option<Instant>,
    stat_files: os::StatFiles,
    /// Where the next wall tick starts in the thread list.
    wall_cursor: usize,
    /// A CPU sample's leaf lay outside every executable mapping known: the mappings are read
    /// again soon.
    unknown_leaf: bool,
}
