//! Record types of trace format v1. Each record is `u16 tag, u32 body length, body`; the body's
//! fields are listed here in order (see docs/trace-format.md). Timestamps (`ts`) are nanoseconds
//! since the agent started (CLOCK_MONOTONIC); ids are the runtime's (pointers) unless noted.

use crate::codec::{Field, Reader};
use crate::DecodeError;

macro_rules! records {
    ( $( $(#[$doc:meta])* $tag:literal $name:ident { $( $(#[$fdoc:meta])* $field:ident : $ty:ty ),* $(,)? } )* ) => {
        $(
            $(#[$doc])*
            #[derive(Clone, Debug, PartialEq, Default)]
            pub struct $name { $( $(#[$fdoc])* pub $field: $ty, )* }

            impl $name {
                pub const TAG: u16 = $tag;
            }

            impl From<$name> for Record {
                fn from(r: $name) -> Record { Record::$name(r) }
            }
        )*

        /// Every record of the format. `Unknown` keeps records of tags this version does not know
        /// (written by a newer agent of the same major version); readers skip them.
        #[derive(Clone, Debug, PartialEq)]
        pub enum Record {
            $( $name($name), )*
            Unknown { tag: u16, len: u32 },
        }

        impl Record {
            /// The record's tag.
            pub fn tag(&self) -> u16 {
                match self { $( Record::$name(_) => $tag, )* Record::Unknown { tag, .. } => *tag }
            }

            /// The record's name, as in docs/trace-format.md.
            pub fn name(&self) -> &'static str {
                match self { $( Record::$name(_) => stringify!($name), )* Record::Unknown { .. } => "Unknown" }
            }

            /// Appends the record (tag, length, body) to `out`.
            pub fn encode(&self, out: &mut Vec<u8>) {
                let start = out.len();
                out.extend_from_slice(&self.tag().to_le_bytes());
                out.extend_from_slice(&[0u8; 4]);
                match self {
                    $( Record::$name(r) => { $( r.$field.put(out); )* } )*
                    Record::Unknown { .. } => {}
                }
                // A CPU sample without an activity keeps the body it had before the field was
                // appended (most samples of every trace): readers give a missing field its default.
                if let Record::CpuSample(c) = self {
                    if c.activity == 0 {
                        out.truncate(out.len() - 4);
                    }
                }
                let len = (out.len() - start - 6) as u32;
                out[start + 2..start + 6].copy_from_slice(&len.to_le_bytes());
            }

            /// Decodes one record body of the given tag. A body that ends exactly where a field
            /// would start (written by an older clrprof, before that field was appended) gives that
            /// field and the ones after it their `Default`; a body cut inside a field is corrupt;
            /// bytes after the known fields (appended by a newer clrprof) are ignored.
            pub fn decode(tag: u16, body: &[u8]) -> Result<Record, DecodeError> {
                let mut r = Reader::new(body);
                let _ = &mut r;
                Ok(match tag {
                    $( $tag => Record::$name($name { $( $field: r.trailing::<$ty>()?, )* }), )*
                    _ => Record::Unknown { tag, len: body.len() as u32 },
                })
            }
        }

        /// For every record type: the records expected from its body cut after 0, 1, … all of its
        /// fields (each field non-default, the missing ones default), with the body length of each
        /// cut. The last entry is the whole record.
        #[cfg(test)]
        pub(crate) fn field_prefixes() -> Vec<Vec<(usize, Record)>> {
            use crate::codec::NonDefault;
            vec![ $( {
                let full = $name { $( $field: <$ty as NonDefault>::non_default(), )* };
                let mut partial = $name::default();
                let mut len = 0usize;
                let mut cuts = vec![(len, Record::$name(partial.clone()))];
                $(
                    let mut bytes = Vec::new();
                    full.$field.put(&mut bytes);
                    len += bytes.len();
                    partial.$field = full.$field.clone();
                    cuts.push((len, Record::$name(partial.clone())));
                )*
                assert_eq!(partial, full);
                cuts
            }, )* ]
        }
    };
}

/// How a function's code came to be.
pub mod code_kind {
    /// JIT-compiled (`JITCompilationFinished`).
    pub const JIT: u8 = 0;
    /// Precompiled ReadyToRun code found in an image (`JITCachedFunctionSearchFinished`).
    pub const PRECOMPILED: u8 = 1;
    /// A dynamic method (`DynamicMethodJITCompilationFinished`): LCG, IL stubs.
    pub const DYNAMIC: u8 = 2;
    /// Code that existed before the profiler attached (`EnumJITedFunctions2` at attach): not a
    /// compilation seen by the profiler.
    pub const EXISTING: u8 = 3;
}

/// Why a method is not counted (`CountMethod.reason`).
pub mod count_uncounted {
    /// Counted: the probe is in its IL.
    pub const COUNTED: u8 = 0;
    /// The runtime substitutes its own IL or expands the method as an intrinsic (`Interlocked`,
    /// `Unsafe`, `MemoryMarshal`, `Volatile`, `RuntimeHelpers`, `Activator`): a probe would vanish.
    pub const INTRINSIC: u8 = 1;
    /// Its body could not be read in full (an unknown header or section): left as it was.
    pub const UNPARSEABLE: u8 = 2;
    /// Every counter slot was taken.
    pub const CAPACITY: u8 = 3;
    /// The probe's metadata (a reference to `Interlocked.Increment`) could not be made in its module.
    pub const NO_PROBE_TOKEN: u8 = 4;
    /// The runtime refused the new body (`SetILFunctionBody` failed) or gave none.
    pub const REFUSED: u8 = 5;
    /// Outside the scope (`--include`/`--exclude`, the default scope).
    pub const OUT_OF_SCOPE: u8 = 6;
}

/// Steps of exception handling (`ExceptionPhase.phase`), in the runtime's callback order.
pub mod exception_phase {
    pub const SEARCH_ENTER: u8 = 1;
    pub const SEARCH_LEAVE: u8 = 2;
    pub const FILTER_ENTER: u8 = 3;
    pub const FILTER_LEAVE: u8 = 4;
    pub const CATCHER_FOUND: u8 = 5;
    pub const UNWIND_ENTER: u8 = 6;
    pub const UNWIND_LEAVE: u8 = 7;
    pub const FINALLY_ENTER: u8 = 8;
    pub const FINALLY_LEAVE: u8 = 9;
    pub const CATCHER_ENTER: u8 = 10;
    pub const CATCHER_LEAVE: u8 = 11;

    /// The phase's name as the reports print it.
    pub fn name(phase: u8) -> &'static str {
        match phase {
            SEARCH_ENTER => "search-enter",
            SEARCH_LEAVE => "search-leave",
            FILTER_ENTER => "filter-enter",
            FILTER_LEAVE => "filter-leave",
            CATCHER_FOUND => "catcher-found",
            UNWIND_ENTER => "unwind-enter",
            UNWIND_LEAVE => "unwind-leave",
            FINALLY_ENTER => "finally-enter",
            FINALLY_LEAVE => "finally-leave",
            CATCHER_ENTER => "catch-enter",
            CATCHER_LEAVE => "catch-leave",
            _ => "unknown",
        }
    }
}

records! {
    /// First record of every trace: who was profiled and how.
    1 ProcessStart {
        pid: u32,
        /// Wall-clock time (ns since the Unix epoch) at `ts` = 0.
        start_unix_ns: u64,
        command_line: String,
        /// e.g. "10.0.12".
        runtime_version: String,
        runtime_major: u16,
        /// Newest ICorProfilerInfo version the runtime offered.
        info_version: u32,
        event_mask_low: u32,
        event_mask_high: u32,
        agent_version: String,
        /// The agent's effective configuration, `key=value` lines.
        config: String,
        /// The machine's host name (`/proc/sys/kernel/hostname`); empty: not recorded.
        host: String,
        /// `CLRPROF_SERVICE`: the service the process belongs to; empty: not set.
        service: String,
        /// `CLRPROF_LABELS`: the user's own labels, `key=value` lines; empty: none.
        labels: String,
    }
    /// The agent stopped cleanly (`Shutdown`); absent after a crash or `kill -9`.
    2 AgentStop { ts: u64, records_written: u64, records_dropped: u64, bytes_dropped: u64 }
    /// Appended by `clrprof record` after the child exited.
    3 ProcessExit {
        /// Wall-clock time (ns since the Unix epoch) of the exit.
        end_unix_ns: u64,
        exit_code: Option<i32>,
        signal: Option<i32>,
    }
    /// A diagnostic from the agent worth keeping with the data (level: 0 info, 1 warning, 2 error).
    4 Message { ts: u64, level: u8, text: String }

    // Tag ranges: 1–29 process, loads, JIT and threads (this list); 30–49 instrumentation
    // (enter/leave hooks); 50–69 sampling; 70–99 runtime events (exceptions, GC, allocations,
    // contention, event log, counters); 100–109 heap snapshots.
    10 AppDomainCreated { ts: u64, id: u64, name: String }
    11 AppDomainUnloaded { ts: u64, id: u64 }
    12 AssemblyLoaded { ts: u64, id: u64, appdomain: u64, module: u64, name: String, load_ns: u64 }
    13 AssemblyUnloaded { ts: u64, id: u64 }
    14 ModuleLoaded { ts: u64, id: u64, assembly: u64, path: String, base_address: u64, load_ns: u64 }
    15 ModuleUnloaded { ts: u64, id: u64 }
    16 ClassLoaded { ts: u64, id: u64, module: u64, token: u32, name: String }
    17 ClassUnloaded { ts: u64, id: u64 }
    /// A function got native code. A function recompiled by tiering gets one record per version.
    18 FunctionCompiled {
        ts: u64,
        id: u64,
        /// OS thread id of the compiling thread.
        os_tid: u32,
        /// 0 for code shared between reference-type instantiations.
        class: u64,
        module: u64,
        token: u32,
        /// `Namespace.Type.Method`, nested types joined with `+`, generic arguments in `<>`.
        name: String,
        /// The declaring type's name (as in `name`).
        class_name: String,
        /// `ReturnType (ParamType, ...)`.
        signature: String,
        code_start: u64,
        code_size: u64,
        /// Time from JITCompilationStarted to Finished (0 for precompiled code).
        jit_ns: u64,
        /// See [`code_kind`].
        kind: u8,
        /// IL size in bytes, 0 when unknown.
        il_size: u32,
    }
    19 FunctionUnloaded { ts: u64, id: u64 }
    20 ThreadCreated { ts: u64, id: u64 }
    21 ThreadDestroyed { ts: u64, id: u64 }
    22 ThreadOsId { ts: u64, id: u64, os_tid: u32 }
    23 ThreadNamed { ts: u64, id: u64, name: String }

    /// How enter/leave instrumentation was set up (written once, at `Initialize`).
    30 InstrumentationInfo {
        /// `COR_PRF_DISABLE_INLINING`: every call is seen.
        inlining_disabled: bool,
        tiering_disabled: bool,
        /// Always true with enter/leave hooks: ReadyToRun code is ignored and JIT-compiled.
        ready_to_run_ignored: bool,
        /// The hooks' estimated own cost is moved from exclusive time to profiler time.
        profiler_time_subtracted: bool,
        /// Timing off: only call counts.
        counts_only: bool,
        /// Ordered enter/leave events are kept too (`FlowEvents`).
        flow: bool,
        /// `;`-separated `--include` / `--exclude` patterns.
        include: String,
        exclude: String,
        /// Calibrated cost of one hook (enter or leave), ns.
        hook_cost_ns: f64,
    }
    /// New nodes of a thread's calling-context tree. Node ids are per tree, consecutive from
    /// `first`; parent `u32::MAX` is the thread's root; `functions` are FunctionIDs.
    31 CallTreeNodes {
        os_tid: u32,
        first: u32,
        parents: Vec<u32>,
        functions: Vec<u64>,
        /// Which tree of the process (one per thread lifetime, from 1; the kernel reuses tids, so
        /// two threads can share `os_tid`); 0 = not recorded (older agents: one tree per `os_tid`,
        /// a new one where `first` is 0).
        tree: u32,
        /// Each node's call site: the return address into its parent's code (the word below the
        /// caller's SP at the enter hook); a node is a (function, call site) child of its
        /// parent. Empty in traces written before call sites (one child per function).
        sites: Vec<u64>,
    }
    /// Cost added to nodes of a thread's calling-context tree since the previous delta.
    32 CallTreeDelta {
        os_tid: u32,
        ts: u64,
        nodes: Vec<u32>,
        calls: Vec<u64>,
        time_ns: Vec<u64>,
        suspended_ns: Vec<u64>,
        profiler_ns: Vec<u64>,
        /// The tree the nodes belong to (as in `CallTreeNodes`; 0 = not recorded).
        tree: u32,
    }
    /// Ordered enter/leave events of one thread (`--flow`): `kinds` 0 enter, 1 leave, 2 tailcall,
    /// 3 unwind (left by an exception); `ts` in ns since the agent started.
    33 FlowEvents { os_tid: u32, kinds: Vec<u8>, functions: Vec<u64>, ts: Vec<u64>, dropped: u64 }
    /// A function the instrumentation decided about (`hooked` false: filtered out, no hooks).
    34 FunctionHooked { id: u64, hooked: bool }
    /// `CallTreeDelta` packed: the same figures, `count` nodes, each as five LEB128 varints in
    /// `packed` — the node id (the first as is, then the gap after the previous node minus one:
    /// nodes ascend), calls, time_ns, suspended_ns, profiler_ns. About a quarter of the size.
    35 CallTreeCosts { os_tid: u32, ts: u64, tree: u32, count: u32, packed: Vec<u8> }

    /// `record --count`: exact per-method call counts from a probe written into each in-scope
    /// method's IL at its first compilation, inlining and ReadyToRun (out of scope) left on.
    /// Written once, at `Initialize`.
    36 CountInfo {
        /// Counter slots the agent has (methods past it are uncounted, [`count_uncounted::CAPACITY`]).
        capacity: u32,
        /// `;`-separated `--include` / `--exclude` patterns.
        include: String,
        exclude: String,
        /// What is in scope without patterns: `all` or `app` (modules outside the shared framework).
        scope: String,
    }
    /// A method definition the count probes decided about, named by the FunctionID of its first
    /// compilation (generic instantiations share their definition's IL and slot: counts are per
    /// `(module, token)`). `slot` is the counter's index, `u32::MAX` with `reason` (see
    /// [`count_uncounted`]) when the method is not counted. `name`: the definition's name with its
    /// generic parameters as declared (`Ns.Type<T>.Method<U>`) when it differs from the
    /// function's (a generic instantiation), else empty.
    37 CountMethod { function: u64, module: u64, token: u32, slot: u32, reason: u8, name: String }
    /// Calls counted since the previous `CountDeltas`, per slot (slots with no new calls left out).
    38 CountDeltas { ts: u64, slots: Vec<u32>, counts: Vec<u64> }

    // 50–69: sampling (docs/trace-format.md, "Sampling").
    /// Sampling settings, written once when the sampler starts.
    50 SamplingStart {
        ts: u64,
        /// Requested CPU sampling rate (per thread, per CPU-second), 0 when CPU sampling is off.
        cpu_rate_hz: u32,
        /// Wall-clock sampling rate (ticks per second), 0 when wall sampling is off.
        wall_rate_hz: u32,
        /// Deepest stack recorded (frames) by the CPU sampler's walk.
        max_frames: u32,
        /// Deepest stack kept from the runtime's walks (wall samples); 0 in older traces.
        max_walk_frames: u32,
    }
    /// An executable file mapping of the process (`/proc/self/maps`), for naming native IPs.
    51 NativeMapping {
        ts: u64,
        start: u64,
        end: u64,
        file_offset: u64,
        path: String,
        /// The file's GNU build-id (`NT_GNU_BUILD_ID`), so readers name frames from the very file
        /// that was mapped; empty when the file has none or could not be read, and in traces
        /// written before the field existed.
        build_id: Vec<u8>,
    }
    /// A sampled stack, leaf first, interned by `id` (a later definition of the same id replaces
    /// the earlier one). `functions` is empty (resolve `ips` through code ranges and mappings) or
    /// has one FunctionID per frame, 0 where the walker had none.
    52 SampleStack {
        id: u32,
        ips: Vec<u64>,
        functions: Vec<u64>,
        /// What the thread was doing in the runtime when it was sampled (see [`runtime_activity`]):
        /// 0 when nothing was recorded (and in traces written before the field existed).
        activity: u64,
    }
    /// `count` CPU-time samples of one thread with one stack, standing for `cpu_ns` of the
    /// thread's CPU time (measured from its CPU clock, spread over its samples).
    53 CpuSample {
        ts: u64,
        os_tid: u32,
        stack: u32,
        count: u32,
        cpu_ns: u64,
        /// The thread's EventSource activity id when the samples were taken, as an index defined
        /// by a [`SampleActivity`] record (`record --async` once the agent found where the runtime
        /// keeps it, see [`ActivityOffset`]); 0 for none (and in older traces).
        activity: u32,
    }
    /// `count` wall-clock samples of one thread with one stack, standing for `wall_ns` of elapsed
    /// time (running or blocked).
    54 WallSample { ts: u64, os_tid: u32, stack: u32, count: u32, wall_ns: u64 }
    /// Sampler counters so far (the last one wins).
    55 SamplerStats {
        ts: u64,
        cpu_samples: u64,
        /// CPU samples lost because a thread's buffer was full.
        cpu_dropped: u64,
        wall_ticks: u64,
        /// Thread stacks walked with DoStackSnapshot.
        walks: u64,
        /// Ticks skipped because SuspendRuntime failed.
        suspend_failures: u64,
        /// DoStackSnapshot calls that failed.
        walk_failures: u64,
        /// Threads whose CPU timer could not be created.
        timer_failures: u64,
        /// Threads registered with the sampler.
        threads: u64,
        /// Time the runtime was suspended by the sampler.
        suspended_ns: u64,
        /// CPU time of the sampler thread itself.
        sampler_cpu_ns: u64,
    }
    /// An EventSource activity id CPU samples carry (`CpuSample::activity`), interned by `index`
    /// (1 and up; a later definition of the same index replaces the earlier one): the GUID's 16
    /// bytes as in memory.
    64 SampleActivity { index: u32, id: Vec<u8> }
    /// Where the agent reads a thread's current EventSource activity id for its samples: the
    /// offset of the id in the runtime's native `Thread` object (a profiler `ThreadID`), found by
    /// matching the ids of delivered task events. `offset` 0: not found (samples carry no activity
    /// id); `u32::MAX`: from events (the ids of TplEventSource's `SetActivityId` events, kept per
    /// thread by the agent: .NET 8 and 9; the counts are then 0); `matches` events on `threads`
    /// distinct threads confirmed it, `mismatches` contradicted the best candidate.
    65 ActivityOffset { ts: u64, offset: u32, matches: u32, threads: u32, mismatches: u32 }
    /// Native code of one code version of a managed function (every tier, from
    /// `GetNativeCodeStartAddresses` + `GetCodeInfo4`): the sampler's map of managed IPs.
    56 CodeRange { id: u64, start: u64, size: u64 }
    /// The IL-to-native map of one code version of a managed function (`GetILToNativeMapping3`
    /// of the version's start address): `entries` holds triples (IL offset, native start offset,
    /// native end offset), offsets from `code_start`; IL offsets `0xFFFFFFFF` (no mapping),
    /// `0xFFFFFFFE` (prolog) and `0xFFFFFFFD` (epilog) are the runtime's special values. What
    /// resolves a sampled IP to its IL offset, then to a source line through the PDB. Written once
    /// per code version that sampled stacks hit.
    57 IlMap { id: u64, code_start: u64, entries: Vec<u32> }

    // Runtime events (tags 70 and up): exceptions, GCs and suspensions, allocations, lock contention, type loads.
    /// An exception was thrown (`ExceptionThrown`), with the managed stack at the throw.
    70 ExceptionThrown {
        ts: u64,
        os_tid: u32,
        /// The runtime's ThreadID of the throwing thread.
        thread: u64,
        class: u64,
        type_name: String,
        /// FunctionIDs, innermost (the throw) first; runs of native frames are left out. Empty when
        /// the agent did not walk this throw (it walks the first 32 throws of each type, then every
        /// 100th, to bound the cost of exception-heavy code).
        stack: Vec<u64>,
        /// The exception object was thrown again (`throw;` in a catch, or a caught exception thrown
        /// anew): the agent saw the same object thrown on this thread since the last garbage
        /// collection. False in traces of older agents.
        rethrow: bool,
    }
    /// One step of exception handling on a thread; see [`exception_phase`].
    71 ExceptionPhase { ts: u64, os_tid: u32, phase: u8, function: u64 }
    /// A garbage collection started (`GarbageCollectionStarted`).
    72 GcStarted {
        ts: u64,
        os_tid: u32,
        /// Oldest generation collected (0, 1 or 2).
        generation: u8,
        /// `COR_PRF_GC_REASON`: 1 induced, 0 other.
        reason: u32,
        /// Used bytes of gen0, gen1, gen2, LOH, POH before the collection.
        sizes: Vec<u64>,
    }
    /// The collection that started last and is not finished yet, finished (`GarbageCollectionFinished`).
    73 GcFinished {
        ts: u64,
        os_tid: u32,
        /// Used bytes of gen0, gen1, gen2, LOH, POH after the collection.
        sizes: Vec<u64>,
    }
    /// The runtime began suspending threads (`RuntimeSuspendStarted`); `reason` is `COR_PRF_SUSPEND_REASON`
    /// (1 GC, 6 GC preparation, 9 profiler, ...).
    74 RuntimeSuspended { ts: u64, os_tid: u32, reason: u32 }
    /// Threads run again (`RuntimeResumeFinished`).
    75 RuntimeResumed { ts: u64, os_tid: u32 }
    /// The runtime's own description of a collection (EventPipe `GCStart_V2`), when the session runs.
    76 GcInfo {
        ts: u64,
        /// GC index (1-based count of collections).
        index: u32,
        generation: u32,
        /// `GCReason`: 0 small allocation, 1 induced, 2 low memory, 3 empty, 4 large allocation, ...
        reason: u32,
        /// `GCType`: 0 blocking, 1 background, 2 foreground (during a background GC).
        kind: u32,
    }
    /// Exact allocation counts of one type since the previous record of that type (`ObjectAllocated`,
    /// `--alloc exact`).
    77 AllocationCounts { ts: u64, class: u64, type_name: String, count: u64, bytes: u64 }
    /// A sampled allocation (EventPipe `AllocationSampled` on .NET 10, `GCAllocationTick` before).
    78 AllocationSample {
        ts: u64,
        os_tid: u32,
        class: u64,
        type_name: String,
        /// Size of the sampled object in bytes.
        size: u64,
        /// Bytes allocated since the previous tick (`AllocationTick`); 0 for `AllocationSampled`;
        /// the mean sampling interval in bytes for the agent's own sampling (source 2).
        amount: u64,
        /// 0 `AllocationSampled` (Poisson sampling, mean 100 KiB), 1 `AllocationTick` (every ~100 KiB),
        /// 2 the agent's Poisson sampling of `ObjectAllocated` under `--alloc exact` (mean `amount`
        /// bytes; these samples carry the stacks of allocation sites, the counts are exact).
        source: u8,
        /// Instruction pointers from the runtime, innermost first (empty for in-process sessions).
        ips: Vec<u64>,
        /// FunctionIDs walked by the agent on the allocating thread, innermost first.
        stack: Vec<u64>,
        /// How many samples of its kind a walked stack stands for: 1 when every such sample is
        /// walked (the first samples of a type, large objects, source 2), N when one in N is. 0 when
        /// not walked, or unknown (written by an older agent, whose readers scale the sites of a
        /// type to the type's total).
        walk_weight: u32,
        /// How many samples this one stands for after the agent's writer thinned a burst of them
        /// (`CLRPROF_ALLOC_RATE`): each kept with probability 1/N counts N times. 0 (older agents)
        /// or 1: itself alone.
        weight: u32,
    }
    /// A `catch` was entered (`ExceptionCatcherEnter`) for the innermost exception in flight on the
    /// thread, with the handling steps it went through. Written instead of the `ExceptionPhase`
    /// records when the event log is off (one record per exception instead of one per step).
    79 ExceptionCaught {
        ts: u64,
        os_tid: u32,
        /// The function whose `catch` runs.
        function: u64,
        /// The throwing function (the first frame the first pass searched), 0 when unknown.
        site: u64,
        /// Frames visited by the first pass (`ExceptionSearchFunctionEnter`).
        search_frames: u32,
        filters: u32,
        /// Frames unwound by the second pass (`ExceptionUnwindFunctionEnter`).
        unwind_frames: u32,
        finallies: u32,
    }
    /// A thread started waiting for a contended Monitor lock (EventPipe `ContentionStart`), with the
    /// waiting thread's managed stack (FunctionIDs, innermost first).
    80 ContentionStarted { ts: u64, os_tid: u32, stack: Vec<u64> }
    /// The wait ended (EventPipe `ContentionStop_V1`); `duration_ns` is the runtime's measure (0 when
    /// the runtime gave none).
    81 ContentionEnded { ts: u64, os_tid: u32, duration_ns: u64 }
    /// The exception recorder changed mode (see `exception_monitoring`): during an exception storm
    /// the runtime's exception callbacks are paused and resumed for short sampling windows, and
    /// throws seen in those windows stand for the paused time around them.
    82 ExceptionMonitoring {
        ts: u64,
        /// `exception_monitoring::FULL`, `PAUSED` or `WINDOW`.
        mode: u8,
        /// Throws the agent had seen in all, when the mode changed.
        observed: u64,
    }
    /// A type load during which the thread was sampled (EventPipe `TypeLoadStop`): names the
    /// `runtime_activity::TYPE_LOAD` word `load_id` of those samples.
    83 TypeLoad { ts: u64, os_tid: u32, load_id: u32, class: u64, type_name: String }
    /// Exceptions thrown in the process so far by the runtime's own count (EventPipe
    /// `ExceptionThrown_V1`, delivered even while the exception callbacks are paused), written
    /// when it changed, at the agent's flushes, while the exception rate limit is in force.
    84 ExceptionCount {
        ts: u64,
        thrown: u64,
        /// Of `thrown`, those the runtime flagged as rethrows. .NET 8 raises the event for rethrows
        /// too (flag 0x4); .NET 9 and later only for new exceptions: `thrown - rethrown` is the
        /// count of new exceptions either way. 0 in traces of older agents.
        rethrown: u64,
    }
    /// A waiting stack of Monitor contention (FunctionIDs, innermost first), numbered for
    /// `ContentionCounts`; written once, before the first counts that refer to it.
    85 ContentionStack { id: u32, stack: Vec<u64> }
    /// Monitor contention aggregated by the agent: the contentions that started in
    /// `[ts, ts + interval_ns)`, per waiting stack (`stacks[i]`, a `ContentionStack` id): how many
    /// ended, their total and longest wait, and how many were never seen to end (the trace ended
    /// while they waited, or the thread's next contention began first). Contentions of one interval
    /// and stack may come in several records (those that ended later): readers add them up.
    86 ContentionCounts {
        ts: u64,
        interval_ns: u64,
        stacks: Vec<u32>,
        counts: Vec<u64>,
        wait_ns: Vec<u64>,
        max_wait_ns: Vec<u64>,
        unended: Vec<u64>,
    }
    /// A throw stack of exceptions aggregated by the agent (FunctionIDs, innermost first),
    /// numbered from 1 for `ExceptionCounts`; written once, before the first counts that use it.
    87 ExceptionStack { id: u32, stack: Vec<u64> }
    /// An exception type of `ExceptionCounts`, numbered from 1 (`class` and its name; a class id
    /// reused by another type after an unload gets another number).
    88 ExceptionType { id: u32, class: u64, type_name: String }
    /// Caught exceptions aggregated by the agent (see [`ExceptionRow`]): `count` rows, each as
    /// twelve LEB128 varints in `packed`. Every exception thrown in `[ts, ts + interval_ns)` and
    /// caught is in exactly one row; the rows of one interval may come in several records.
    89 ExceptionCounts {
        ts: u64,
        interval_ns: u64,
        count: u32,
        packed: Vec<u8>,
        /// Per row, how many of its exceptions were rethrows; empty when none was (and in traces
        /// of older agents).
        rethrown: Vec<u64>,
    }
    /// `AllocationSample` records packed, as the agent writes them once per flush: `count`
    /// samples in `packed`, each as LEB128 varints — `ts` minus this record's `ts`, os_tid, class,
    /// size, amount, source, the type name's byte length and its UTF-8 bytes, the number of `ips`
    /// and each, the number of `stack` frames and each. About a third of the size. `walk_weights`
    /// holds each sample's `walk_weight` as a varint, in the same order (empty when written by an
    /// older agent: the weights are then unknown, 0). `weights` holds each sample's `weight` the
    /// same way (empty when every sample stands for itself alone), and `thinned` how many samples
    /// the writer dropped since the previous record (which the kept ones' weights stand for).
    /// `stacks` holds each sample's stack reference as a varint, in the same order: 0 when its
    /// `ips` and `stack` are inline in `packed`, else an `AllocationStack` id (its lists in
    /// `packed` are then empty); empty when every sample's stack is inline (and in traces of
    /// older agents).
    90 AllocationSamples {
        ts: u64,
        count: u32,
        packed: Vec<u8>,
        walk_weights: Vec<u8>,
        weights: Vec<u8>,
        thinned: u64,
        stacks: Vec<u8>,
    }
    /// A collection ended, by the runtime's own account (EventPipe `GCEnd_V1`, on the thread that
    /// ran it: a background GC ends on the background GC thread). With `GcInfo` it pairs each
    /// collection's start and end by index, nested ones included.
    91 GcEnd { ts: u64, os_tid: u32, index: u32, generation: u32 }
    /// A collection trigger fired (`CLRPROF_TRIGGER`, see [`crate::trigger`]): `seq` numbers the
    /// fires of the run from 1, `rule` is the rule's canonical text, `value` what was measured in
    /// the rule's unit (exception: 1 throw; gc-pause and request-p95: nanoseconds; cpu: percent
    /// of one core), `detail` says it in words. `action` 0: CPU sampling goes to `rate_hz` for
    /// `window_ns`; 1: a heap snapshot is taken. `TriggerEnded` with the same `seq` follows.
    92 TriggerFired {
        ts: u64,
        seq: u32,
        rule: String,
        value: u64,
        detail: String,
        action: u8,
        rate_hz: u32,
        window_ns: u64,
    }
    /// What a fire started is over: the high-rate window ended (sampling is back at the run's
    /// rate) or the heap snapshot was written (`snapshot`, its number; 0 when none was taken).
    /// A trace that ends inside a window has no `TriggerEnded` for it.
    93 TriggerEnded { ts: u64, seq: u32, snapshot: u32 }
    /// A stack of allocation samples (`ips` and `stack` as in `AllocationSample`), numbered from 1
    /// for `AllocationSamples::stacks`; written before the first record that refers to it. The
    /// agent keeps a bounded number of ids and starts again from 1 when it forgets them: a
    /// definition replaces any earlier one of the same id.
    94 AllocationStack { id: u32, ips: Vec<u64>, stack: Vec<u64> }

    // 100–109: heap snapshots (`clrprof heap`, `record --heap-snapshot-at`): the object graph the
    // runtime reports in one induced full blocking collection (its GC heap-dump events), packed
    // as `crate::heap` describes. Every record names its snapshot (numbered from 1 in a trace).
    /// A snapshot begins; `trigger`: 0 an attach (`clrprof heap`), 1 a time (`--heap-snapshot-at`),
    /// 2 a collection trigger (`--trigger-action heap`).
    100 HeapSnapshotStart { ts: u64, snapshot: u32, trigger: u8 }
    /// Type names of the snapshot (`GCBulkType`): the runtime's type id (its MethodTable) and
    /// name, and the type ids of its generic arguments or array element (`params`, `param_counts`
    /// per type, flattened).
    101 HeapTypes { snapshot: u32, ids: Vec<u64>, names: Vec<String>, param_counts: Vec<u32>, params: Vec<u64> }
    /// One `GCBulkNode` event: `count` objects (address, size, type id, number of references),
    /// `seq` the event's index in the dump (from 0, no gaps when nothing was lost).
    102 HeapNodes { snapshot: u32, seq: u32, count: u32, packed: Vec<u8> }
    /// One `GCBulkEdge` event: `count` references, in the order of the nodes' reference counts.
    103 HeapEdges { snapshot: u32, seq: u32, count: u32, packed: Vec<u8> }
    /// One `GCBulkRootEdge` event: `count` roots (object, kind, flags, root id).
    104 HeapRoots { snapshot: u32, seq: u32, count: u32, packed: Vec<u8> }
    /// One `GCBulkRootStaticVar` event: static fields holding objects (the field's slot address,
    /// the object, the object's type id, flags — 1 thread-static — and the field's name).
    /// `classes` (appended later) holds each field's declaring class, found by the agent after
    /// the collection (`Namespace.Class`, empty when not found); empty when written by an older
    /// agent.
    105 HeapStaticRoots {
        snapshot: u32,
        seq: u32,
        slots: Vec<u64>,
        objects: Vec<u64>,
        types: Vec<u64>,
        flags: Vec<u32>,
        names: Vec<String>,
        classes: Vec<String>,
    }
    /// One `GCBulkRootConditionalWeakTableElementEdge` event: dependent handles (a key keeps its
    /// value alive), `count` (key, value) pairs.
    106 HeapDependentEdges { snapshot: u32, seq: u32, count: u32, packed: Vec<u8> }
    /// The snapshot ended. `complete` is false when anything was lost or cut: events dropped at
    /// the agent's buffer limit (`dropped_events`, `dropped_bytes`), an event whose payload did
    /// not parse (`bad_events`), or a dump the runtime did not finish; `problem` says which in
    /// words. Counts are what the agent wrote; `pause_ns` is how long the induced collection and
    /// its walk held the process (the session start's duration, on the thread that asked).
    107 HeapSnapshotEnd {
        ts: u64,
        snapshot: u32,
        complete: bool,
        nodes: u64,
        edges: u64,
        roots: u64,
        bytes: u64,
        dropped_events: u64,
        dropped_bytes: u64,
        bad_events: u64,
        pause_ns: u64,
        problem: String,
        /// Events of each kind written: nodes, edges, roots, statics, dependent edges, types.
        events: Vec<u32>,
        /// Of `pause_ns`, the time the agent spent taking the events (parsing and packing them on
        /// the GC's thread).
        agent_ns: u64,
    }
    /// An ASP.NET Core request began (EventSource `Microsoft.AspNetCore.Hosting`, `RequestStart`
    /// id 3 {UTF-16z method, UTF-16z path}), on the thread that took it. `activity` is the event's
    /// EventSource activity id (16 bytes, the GUID's bytes in memory order), which the runtime's
    /// activity tracker gives each request when `TasksFlowActivityIds` of `TplEventSource` is on:
    /// the request's `RequestStopped` and `RequestEndpoint` carry the same id. Tags 110–119 are
    /// requests, waits and the thread pool (`--async`).
    110 RequestStarted { ts: u64, os_tid: u32, activity: Vec<u8>, method: String, path: String }
    /// The request ended (`RequestStop`, id 4, written when its `HttpContext` is disposed, after
    /// the response was sent), on the thread that ended it.
    111 RequestStopped { ts: u64, os_tid: u32, activity: Vec<u8> }
    /// What ASP.NET Core's own log says of a request (EventSource `Microsoft-Extensions-Logging`,
    /// `FormattedMessage`): the endpoint it was routed to (`Executing endpoint '…'` of
    /// `Microsoft.AspNetCore.Routing.EndpointMiddleware`: for a minimal API `HTTP: GET /route/{id}`,
    /// for MVC the action's name; empty when this record gives the status only) and the response's
    /// status code (`Request finished …` of `Microsoft.AspNetCore.Hosting.Diagnostics`; 0 when
    /// this record gives the endpoint only). `activity` as in `RequestStarted`.
    112 RequestEndpoint { ts: u64, os_tid: u32, activity: Vec<u8>, endpoint: String, status: u32 }
    /// A thread began waiting on a wait handle (`WaitHandleWaitStart`, runtime event id 301,
    /// keyword `WaitHandle` 0x40000000000, .NET 9 and later) {u8 WaitSource (0 unknown, 1 a
    /// `Monitor.Wait`), ptr AssociatedObjectID, u16 ClrInstanceID}: `Task.Wait`, `.Result`,
    /// `Monitor.Wait`, a contended `Monitor.Enter`, `SemaphoreSlim.Wait`, `ManualResetEventSlim.Wait`…
    /// `stack`: the waiting thread's managed stack, FunctionIDs innermost first. `activity`: the
    /// event's EventSource activity id as in `RequestStarted` (the thread's id at the wait: that of
    /// the request it works for, or one nested in it; empty in older traces).
    113 WaitStarted { ts: u64, os_tid: u32, source: u8, stack: Vec<u64>, activity: Vec<u8> }
    /// The wait ended (`WaitHandleWaitStop`, id 302).
    114 WaitEnded { ts: u64, os_tid: u32 }
    /// The thread pool's worker threads (runtime events, keyword `Threading` 0x10000):
    /// `kind` 0 a worker started (`ThreadPoolWorkerThreadStart`, id 50 {u32 ActiveWorkerThreadCount,
    /// u32 RetiredWorkerThreadCount, u16 ClrInstanceID}), 1 a worker stopped (id 51, same payload),
    /// 2 the pool changed its target (`ThreadPoolWorkerThreadAdjustmentAdjustment`, id 55 {f64
    /// AverageThroughput, u32 NewWorkerThreadCount, u32 Reason, u16 ClrInstanceID}). `count` is the
    /// active workers (kinds 0, 1) or the new target (kind 2); `reason` the adjustment's reason
    /// (`pool_reason`), 0 otherwise.
    115 ThreadPoolWorkers { ts: u64, os_tid: u32, kind: u8, count: u32, retired: u32, reason: u32 }
    /// Events of the task library (`TplEventSource`, recorded with `CLRPROF_ASYNC=1`) packed as
    /// the agent writes them once per flush: `count` events in `packed`, each as described in
    /// [`crate::tasks`] (varints; times relative to `ts`).
    120 TaskEvents { ts: u64, count: u32, packed: Vec<u8> }
}

impl AllocationSamples {
    /// Packs `samples` (in order, every stack inline) against the earliest of their timestamps;
    /// `None` when there are more than `u32::MAX`.
    pub fn pack(samples: &[AllocationSample]) -> Option<AllocationSamples> {
        Self::pack_refs(samples, &[])
    }

    /// Packs `samples` with their stack references `refs` (one per sample, or none: all 0): a
    /// sample whose reference is not 0 is written without its `ips` and `stack`.
    pub(crate) fn pack_refs(samples: &[AllocationSample], refs: &[u32]) -> Option<AllocationSamples> {
        let count = u32::try_from(samples.len()).ok()?;
        let ts = samples.iter().map(|a| a.ts).min().unwrap_or(0);
        let mut packed = Vec::with_capacity(samples.len() * 24);
        for (i, a) in samples.iter().enumerate() {
            for v in [a.ts - ts, a.os_tid as u64, a.class, a.size, a.amount, a.source as u64, a.type_name.len() as u64]
            {
                put_varint(&mut packed, v);
            }
            packed.extend_from_slice(a.type_name.as_bytes());
            let inline = refs.get(i).is_none_or(|&r| r == 0);
            for list in [&a.ips, &a.stack] {
                if !inline {
                    put_varint(&mut packed, 0);
                    continue;
                }
                put_varint(&mut packed, list.len() as u64);
                for &v in list.iter() {
                    put_varint(&mut packed, v);
                }
            }
        }
        let mut walk_weights = Vec::new();
        if samples.iter().any(|a| a.walk_weight != 0) {
            walk_weights.reserve(samples.len());
            for a in samples {
                put_varint(&mut walk_weights, a.walk_weight as u64);
            }
        }
        let mut weights = Vec::new();
        if samples.iter().any(|a| a.weight > 1) {
            weights.reserve(samples.len());
            for a in samples {
                put_varint(&mut weights, a.weight as u64);
            }
        }
        let mut stacks = Vec::new();
        if refs.iter().any(|&r| r != 0) {
            stacks.reserve(samples.len());
            for i in 0..samples.len() {
                put_varint(&mut stacks, refs.get(i).copied().unwrap_or(0) as u64);
            }
        }
        Some(AllocationSamples { ts, count, packed, walk_weights, weights, thinned: 0, stacks })
    }

    /// The samples, or why they cannot be read; for a record whose samples refer to no
    /// `AllocationStack` (see [`AllocationSamples::unpack_with`]).
    pub fn unpack(&self) -> Result<Vec<AllocationSample>, DecodeError> {
        self.unpack_with(&crate::AllocationStacks::default())
    }

    /// The samples, each with its full stack (those referred to are looked up in `stacks`, the
    /// `AllocationStack` records read before this one), or why they cannot be read: a packing
    /// that does not hold `count` samples, or a reference to a stack `stacks` does not hold.
    pub fn unpack_with(&self, stacks: &crate::AllocationStacks) -> Result<Vec<AllocationSample>, DecodeError> {
        let bad =
            || DecodeError::Corrupt(format!("AllocationSamples at {} does not hold {} samples", self.ts, self.count));
        let (w, mut wat) = (&self.walk_weights[..], 0usize);
        let (tw, mut twat) = (&self.weights[..], 0usize);
        let (sr, mut srat) = (&self.stacks[..], 0usize);
        let (b, mut at) = (&self.packed[..], 0usize);
        let mut out = Vec::with_capacity((self.count as usize).min(b.len() / 9));
        for _ in 0..self.count {
            let mut v = [0u64; 7];
            for x in v.iter_mut() {
                *x = get_varint(b, &mut at).ok_or_else(bad)?;
            }
            let len = usize::try_from(v[6]).map_err(|_| bad())?;
            let end = at.checked_add(len).filter(|&e| e <= b.len()).ok_or_else(bad)?;
            let type_name = std::str::from_utf8(&b[at..end]).map_err(|_| bad())?.to_string();
            at = end;
            let mut lists = [Vec::new(), Vec::new()];
            for list in lists.iter_mut() {
                let n = get_varint(b, &mut at).ok_or_else(bad)?;
                if n > (b.len() - at) as u64 {
                    return Err(bad());
                }
                for _ in 0..n {
                    list.push(get_varint(b, &mut at).ok_or_else(bad)?);
                }
            }
            let [mut ips, mut stack] = lists;
            let walk_weight = if w.is_empty() {
                0
            } else {
                u32::try_from(get_varint(w, &mut wat).ok_or_else(bad)?).map_err(|_| bad())?
            };
            let weight = if tw.is_empty() {
                0
            } else {
                u32::try_from(get_varint(tw, &mut twat).ok_or_else(bad)?).map_err(|_| bad())?
            };
            let stack_ref = if sr.is_empty() { 0 } else { get_varint(sr, &mut srat).ok_or_else(bad)? };
            if stack_ref != 0 {
                if !ips.is_empty() || !stack.is_empty() {
                    return Err(bad());
                }
                let (i, s) = u32::try_from(stack_ref).ok().and_then(|id| stacks.get(id)).ok_or_else(|| {
                    DecodeError::Corrupt(format!(
                        "AllocationSamples at {} refers to allocation stack {stack_ref}, which was not defined",
                        self.ts
                    ))
                })?;
                (ips, stack) = (i.to_vec(), s.to_vec());
            }
            out.push(AllocationSample {
                ts: self.ts.checked_add(v[0]).ok_or_else(bad)?,
                os_tid: u32::try_from(v[1]).map_err(|_| bad())?,
                class: v[2],
                type_name,
                size: v[3],
                amount: v[4],
                source: u8::try_from(v[5]).map_err(|_| bad())?,
                ips,
                stack,
                walk_weight,
                weight,
            });
        }
        if at != b.len() || wat != w.len() || twat != tw.len() || srat != sr.len() {
            return Err(bad());
        }
        Ok(out)
    }
}

/// One row of `ExceptionCounts`: the exceptions of one thread, type, throw site, throw stack and
/// catching function thrown in one interval, with exact counts and the sums of their handling
/// steps.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ExceptionRow {
    pub os_tid: u32,
    /// An `ExceptionType` id.
    pub type_id: u32,
    /// The throwing function (the walked stack's innermost frame, else the first frame searched).
    pub site: u64,
    /// An `ExceptionStack` id; 0 for the throws whose stack was not walked.
    pub stack: u32,
    /// The function whose `catch` ran.
    pub catcher: u64,
    /// The first and the last throw of the row (`first_ns` within the interval).
    pub first_ns: u64,
    pub last_ns: u64,
    pub count: u64,
    /// Sums over the row's exceptions, as in `ExceptionCaught`.
    pub search_frames: u64,
    pub filters: u64,
    pub unwind_frames: u64,
    pub finallies: u64,
    /// Of `count`, the rethrows (kept in `ExceptionCounts::rethrown`, not in the packed varints).
    pub rethrown: u64,
}

impl ExceptionCounts {
    /// Packs `rows` of the interval starting at `ts`: each as varints — os_tid, type_id, site,
    /// stack, catcher, `first_ns - ts`, `last_ns - first_ns`, count, search_frames, filters,
    /// unwind_frames, finallies. `None` when a row's throws are not inside `[ts, …)` in order.
    pub fn pack(ts: u64, interval_ns: u64, rows: &[ExceptionRow]) -> Option<ExceptionCounts> {
        let mut packed = Vec::with_capacity(rows.len() * 32);
        for r in rows {
            if r.first_ns < ts || r.last_ns < r.first_ns {
                return None;
            }
            for v in [
                r.os_tid as u64,
                r.type_id as u64,
                r.site,
                r.stack as u64,
                r.catcher,
                r.first_ns - ts,
                r.last_ns - r.first_ns,
                r.count,
                r.search_frames,
                r.filters,
                r.unwind_frames,
                r.finallies,
            ] {
                put_varint(&mut packed, v);
            }
        }
        let rethrown: Vec<u64> =
            if rows.iter().any(|r| r.rethrown > 0) { rows.iter().map(|r| r.rethrown).collect() } else { Vec::new() };
        Some(ExceptionCounts { ts, interval_ns, count: u32::try_from(rows.len()).ok()?, packed, rethrown })
    }

    /// The rows, or why they cannot be read.
    pub fn unpack(&self) -> Result<Vec<ExceptionRow>, DecodeError> {
        let bad = || DecodeError::Corrupt(format!("ExceptionCounts at {} does not hold {} rows", self.ts, self.count));
        let (b, mut at) = (&self.packed[..], 0usize);
        let mut rows = Vec::with_capacity((self.count as usize).min(b.len() / 12));
        for _ in 0..self.count {
            let mut v = [0u64; 12];
            for x in v.iter_mut() {
                *x = get_varint(b, &mut at).ok_or_else(bad)?;
            }
            let first_ns = self.ts.checked_add(v[5]).ok_or_else(bad)?;
            rows.push(ExceptionRow {
                os_tid: u32::try_from(v[0]).map_err(|_| bad())?,
                type_id: u32::try_from(v[1]).map_err(|_| bad())?,
                site: v[2],
                stack: u32::try_from(v[3]).map_err(|_| bad())?,
                catcher: v[4],
                first_ns,
                last_ns: first_ns.checked_add(v[6]).ok_or_else(bad)?,
                count: v[7],
                search_frames: v[8],
                filters: v[9],
                unwind_frames: v[10],
                finallies: v[11],
                rethrown: 0,
            });
        }
        if !self.rethrown.is_empty() {
            if self.rethrown.len() != rows.len() {
                return Err(bad());
            }
            for (r, &n) in rows.iter_mut().zip(&self.rethrown) {
                r.rethrown = n.min(r.count);
            }
        }
        if at != b.len() {
            return Err(bad());
        }
        Ok(rows)
    }
}

pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[inline(always)]
pub(crate) fn get_varint(b: &[u8], at: &mut usize) -> Option<u64> {
    // Most of a delta's varints are one byte (calls, suspended time), read in line; the rest out
    // of line. A third of reading an uncapped instrumented trace was this function, called out of
    // line for every varint.
    let i = *at;
    if let Some(&x) = b.get(i) {
        if x < 0x80 {
            *at = i + 1;
            return Some(x as u64);
        }
    }
    get_long_varint(b, at)
}

/// [`get_varint`] of more than one byte, at most ten; `at` stays where it was when no whole one is
/// there.
#[inline(never)]
fn get_long_varint(b: &[u8], at: &mut usize) -> Option<u64> {
    let i = *at;
    let mut v = 0u64;
    for (k, &x) in b.get(i..)?.iter().take(10).enumerate() {
        v |= ((x & 0x7f) as u64) << (7 * k);
        if x < 0x80 {
            *at = i + k + 1;
            return Some(v);
        }
    }
    None
}

/// The FunctionID of a `[call tree capped]` node in `CallTreeNodes` (never a real FunctionID,
/// which is an address): the agent's call trees reached their cap (`CLRPROF_CALLTREE_MAX_MB`),
/// and every call under that node that would have needed a new node is counted in it, with its
/// time, whatever function it was.
pub const CALL_TREE_CAPPED: u64 = 1;

impl CallTreeCosts {
    /// Packs a delta whose nodes ascend (as the agent writes them); `None` when they do not, or
    /// its vectors differ in length.
    pub fn pack(d: &CallTreeDelta) -> Option<CallTreeCosts> {
        let n = d.nodes.len();
        if [d.calls.len(), d.time_ns.len(), d.suspended_ns.len(), d.profiler_ns.len()].iter().any(|&l| l != n) {
            return None;
        }
        let mut packed = Vec::with_capacity(n * 8);
        let mut next = 0u64;
        for i in 0..n {
            let node = d.nodes[i] as u64;
            if node < next {
                return None;
            }
            put_varint(&mut packed, node - next);
            next = node + 1;
            for v in [d.calls[i], d.time_ns[i], d.suspended_ns[i], d.profiler_ns[i]] {
                put_varint(&mut packed, v);
            }
        }
        Some(CallTreeCosts { os_tid: d.os_tid, ts: d.ts, tree: d.tree, count: n as u32, packed })
    }

    /// The delta these costs hold, or why they cannot be read.
    pub fn unpack(&self) -> Result<CallTreeDelta, DecodeError> {
        let n = (self.count as usize).min(self.packed.len() / 5);
        let mut d = CallTreeDelta { os_tid: self.os_tid, ts: self.ts, tree: self.tree, ..Default::default() };
        for v in [&mut d.calls, &mut d.time_ns, &mut d.suspended_ns, &mut d.profiler_ns] {
            v.reserve(n);
        }
        d.nodes.reserve(n);
        self.walk(|node, [calls, time_ns, suspended_ns, profiler_ns]| {
            d.nodes.push(node);
            d.calls.push(calls);
            d.time_ns.push(time_ns);
            d.suspended_ns.push(suspended_ns);
            d.profiler_ns.push(profiler_ns);
        })?;
        Ok(d)
    }

    /// Each node of the delta with its calls, time, suspended and profiler time, in order, handed
    /// to `f` with no delta decoded in between (one of a million nodes takes 36 MB), or why they
    /// cannot be read, in which case `f` was given none: the packing is checked first.
    pub fn each(&self, f: impl FnMut(u32, [u64; 4])) -> Result<(), DecodeError> {
        self.check()?;
        self.walk(f)
    }

    /// [`each`](Self::each) for a reader that calls it for every record: the nodes are decoded
    /// once, into `stage`, and handed to `f` when all of them decoded, where `each` reads the
    /// bytes twice (a check, then the values), 8% of reading an instrumented trace. A packing of
    /// more nodes than an agent puts in one record (65,536) is read as `each` does, so that
    /// `stage` stays within 2.6 MB.
    pub fn each_staged(
        &self,
        stage: &mut Vec<(u32, [u64; 4])>,
        mut f: impl FnMut(u32, [u64; 4]),
    ) -> Result<(), DecodeError> {
        if self.count > 1 << 16 {
            return self.each(f);
        }
        stage.clear();
        self.walk(|node, costs| stage.push((node, costs)))?;
        for &(node, costs) in stage.iter() {
            f(node, costs);
        }
        Ok(())
    }

    /// What [`walk`](Self::walk) finds wrong, found in one pass over the bytes: every varint ends
    /// within 10 bytes (at a byte below 0x80), five a node, the last at the packing's end, and
    /// each node id (the gaps summed) fits in 32 bits; only the gaps are decoded.
    fn check(&self) -> Result<(), DecodeError> {
        let bad = || self.damaged();
        let b = &self.packed[..];
        // Nodes left, the varint of the node (0: its id's gap, 1..=4: its costs), bytes of that
        // varint, the gap and the next node id.
        let (mut left, mut part, mut len, mut gap, mut next) = (self.count, 0u8, 0u32, 0u64, 0u64);
        for (at, &x) in b.iter().enumerate() {
            if left == 0 {
                return Err(bad());
            }
            if part == 0 {
                gap |= ((x & 0x7f) as u64).checked_shl(len * 7).ok_or_else(bad)?;
            }
            len += 1;
            if x & 0x80 != 0 {
                if len == 10 || at + 1 == b.len() {
                    return Err(bad());
                }
                continue;
            }
            len = 0;
            if part == 0 {
                let node = next.checked_add(gap).ok_or_else(bad)?;
                u32::try_from(node).map_err(|_| bad())?;
                next = node + 1;
                gap = 0;
            }
            if part == 4 {
                part = 0;
                left -= 1;
            } else {
                part += 1;
            }
        }
        if left != 0 || part != 0 {
            return Err(bad());
        }
        Ok(())
    }

    /// The error of a packing that does not hold its nodes.
    fn damaged(&self) -> DecodeError {
        DecodeError::Corrupt(format!("CallTreeCosts of thread {} does not hold {} nodes", self.os_tid, self.count))
    }

    /// Reads the packing, handing each node to `f` until it finds damage.
    fn walk(&self, mut f: impl FnMut(u32, [u64; 4])) -> Result<(), DecodeError> {
        let bad = || self.damaged();
        let (b, mut at, mut next) = (&self.packed[..], 0usize, 0u64);
        for _ in 0..self.count {
            let node = next.checked_add(get_varint(b, &mut at).ok_or_else(bad)?).ok_or_else(bad)?;
            next = node + 1;
            let mut v = [0u64; 4];
            for x in v.iter_mut() {
                *x = get_varint(b, &mut at).ok_or_else(bad)?;
            }
            f(u32::try_from(node).map_err(|_| bad())?, v);
        }
        if at != b.len() {
            return Err(bad());
        }
        Ok(())
    }
}

/// What a thread was doing inside the runtime (`SampleStack.activity`): the kind in the top byte,
/// the subject's runtime id (FunctionID, ClassID, AssemblyID, ModuleID; 0 for none) in the low 56
/// bits. Set by the agent between the runtime's own start and finish callbacks on that thread;
/// readers name the runtime's native code of such a sample by it (`[JIT] Namespace.Type.Method`).
pub mod runtime_activity {
    /// JIT compilation of a function (`JITCompilationStarted` … `Finished`), id = FunctionID.
    pub const JIT: u8 = 1;
    /// A type load (EventPipe `TypeLoadStart` … `TypeLoadStop`), id = the runtime's
    /// `TypeLoadStartID`, named by a [`TypeLoad`](crate::TypeLoad) record.
    pub const TYPE_LOAD: u8 = 2;
    /// An assembly load (`AssemblyLoadStarted` … `Finished`), id = AssemblyID.
    pub const ASSEMBLY_LOAD: u8 = 3;
    /// A module load (`ModuleLoadStarted` … `Finished`), id = ModuleID.
    pub const MODULE_LOAD: u8 = 4;
    /// A garbage collection, or the runtime suspension for one, on the thread doing it.
    pub const GC: u8 = 5;
    /// Exception dispatch: from `ExceptionThrown` to `ExceptionCatcherEnter` on that thread.
    pub const EXCEPTION: u8 = 6;
    /// Preparing a function's precompiled (ReadyToRun) code for its first call: the image lookup and
    /// its fixups (`JITCachedFunctionSearchStarted` … `Finished`), id = FunctionID.
    pub const READY_TO_RUN: u8 = 7;

    const ID_MASK: u64 = (1 << 56) - 1;

    /// The packed activity word.
    pub fn pack(kind: u8, id: u64) -> u64 {
        (kind as u64) << 56 | (id & ID_MASK)
    }

    /// (kind, id) of an activity word.
    pub fn unpack(word: u64) -> (u8, u64) {
        ((word >> 56) as u8, word & ID_MASK)
    }
}

/// Modes of `ExceptionMonitoring`, and the agent's rate limit.
pub mod exception_monitoring {
    /// Exceptions observed at full detail before the rate limit can pause the callbacks.
    pub const BURST: u64 = 5_000;
    /// Exceptions per second observed at full detail however long the run (the burst's refill).
    pub const RATE_PER_SEC: u64 = 1_000;
    /// While paused, the callbacks come back for one window of at least this long (it ends at the
    /// agent's next flush) …
    pub const WINDOW_NS: u64 = 40_000_000;
    /// … after this long paused (one window in about 40).
    pub const PAUSE_NS: u64 = 1_950_000_000;
    /// Every exception is observed (the start of every trace).
    pub const FULL: u8 = 0;
    /// Callbacks paused: throws are not observed.
    pub const PAUSED: u8 = 1;
    /// A sampling window while the storm lasts: throws are observed again.
    pub const WINDOW: u8 = 2;
}

/// `ThreadPoolWorkers.reason`: why the pool changed its number of threads (the runtime's
/// `ThreadAdjustmentReasonMap`).
pub mod pool_reason {
    pub const WARMUP: u32 = 0;
    pub const INITIALIZING: u32 = 1;
    pub const RANDOM_MOVE: u32 = 2;
    pub const CLIMBING_MOVE: u32 = 3;
    pub const CHANGE_POINT: u32 = 4;
    pub const STABILIZING: u32 = 5;
    /// Work waited in the queue and no thread took it for a while: the pool injected a thread.
    pub const STARVATION: u32 = 6;
    pub const THREAD_TIMED_OUT: u32 = 7;
    /// A pool thread blocked (`Task.Wait`, `.Result`…) and the pool added a thread in its place.
    pub const COOPERATIVE_BLOCKING: u32 = 8;

    /// The reason's name.
    pub fn name(reason: u32) -> &'static str {
        match reason {
            WARMUP => "warmup",
            INITIALIZING => "initializing",
            RANDOM_MOVE => "random move",
            CLIMBING_MOVE => "climbing move",
            CHANGE_POINT => "change point",
            STABILIZING => "stabilizing",
            STARVATION => "starvation",
            THREAD_TIMED_OUT => "thread timed out",
            COOPERATIVE_BLOCKING => "cooperative blocking",
            _ => "unknown",
        }
    }
}

/// An EventSource activity id (16 bytes as recorded) as a number; 0 when absent or malformed.
pub fn activity_id(bytes: &[u8]) -> u128 {
    <[u8; 16]>::try_from(bytes).map(u128::from_le_bytes).unwrap_or(0)
}
