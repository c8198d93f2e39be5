//! Runtime events: exceptions, garbage collections and suspensions, allocations
//! (exact through `ObjectAllocated`, sampled through an in-process EventPipe session).
//!
//! Every callback here runs in a restricted context (cooperative mode, GC callbacks, EventPipe
//! delivery on the emitting thread): no blocking beyond short uncontended locks, no Info call
//! that can trigger a GC, payloads copied before returning.

pub(crate) mod alloc;
pub(crate) mod contention;
pub(crate) mod eventpipe;
pub(crate) mod exc_counts;
pub(crate) mod exceptions;
pub(crate) mod flow;
pub(crate) mod gc;
pub(crate) mod heap;
pub(crate) mod payload;
pub(crate) mod providers;
pub(crate) mod requests;
pub(crate) mod stack;
pub(crate) mod tasks;

use clrprof_sys::{high, monitor};

use crate::config::{AllocMode, Config};

/// Per-process state of the runtime-event recorders.
#[derive(Default)]
pub(crate) struct Events {
    pub(crate) alloc: alloc::ExactCounts,
    pub(crate) gc: gc::GcState,
    /// The exception storm rate limit.
    pub(crate) limiter: exceptions::Limiter,
    /// Throws seen per exception type (to sample throw stacks).
    pub(crate) throws: std::sync::Mutex<std::collections::HashMap<clrprof_sys::ClassID, u32>>,
    /// Allocation samples seen per type: how many (to sample their stack walks) and whether the
    /// type's name was written (with its first sample only).
    pub(crate) alloc_types: std::sync::Mutex<std::collections::HashMap<u64, eventpipe::SampledType>>,
    /// Monitor contention counted per waiting stack (unless the event log keeps every one).
    pub(crate) contention: contention::Contention,
    /// Allocation samples waiting to be packed by the writer thread.
    pub(crate) alloc_samples: alloc::PendingSamples,
    /// Caught exceptions counted in the agent (under the storm rate limit, the default).
    pub(crate) exception_counts: exc_counts::ExceptionCountsState,
    /// Heap snapshots (their own EventPipe session; see `heap`).
    pub(crate) heap: heap::HeapState,
    /// EventPipe provider handles already named.
    pub(crate) providers: providers::ProviderCache,
    /// Task events waiting to be packed by the writer thread (`CLRPROF_ASYNC`).
    pub(crate) tasks: tasks::TaskEvents,
}

/// Event-mask bits (low, high) the configuration needs.
pub(crate) fn mask(config: &Config, info_version: u32) -> (u32, u32) {
    let mut low = 0;
    let mut high = 0;
    if config.exceptions {
        low |= monitor::EXCEPTIONS;
    }
    if config.triggers.rules.iter().any(|r| matches!(r, clrprof_trace::trigger::Rule::GcPause(_))) {
        low |= monitor::SUSPENDS;
    }
    if config.exceptions || config.locks || config.alloc != AllocMode::Off {
        low |= monitor::ENABLE_STACK_SNAPSHOT;
    }
    if config.gc || config.events {
        // BASIC_GC, not MONITOR_GC: background GC stays on.
        high |= high::BASIC_GC;
        low |= monitor::SUSPENDS;
    }
    if config.exceptions {
        // GC starts and finishes tell when an exception object's address may name another
        // object (see `exceptions::is_rethrow`).
        high |= high::BASIC_GC;
    }
    match config.alloc {
        AllocMode::Exact => low |= monitor::ENABLE_OBJECT_ALLOCATED | monitor::OBJECT_ALLOCATED,
        AllocMode::Sampled if info_version >= 12 => high |= high::MONITOR_EVENT_PIPE,
        _ => {}
    }
    if info_version >= 12 {
        // GCStart_V2 says whether a collection is background and why it ran; Contention* events
        // report Monitor contention; TypeLoadStart/Stop bracket type loads for the sampler; the
        // private provider's FailFast says the process is about to die (`eventpipe`), always.
        high |= high::MONITOR_EVENT_PIPE;
    }
    (low, high)
}

impl Events {
    /// What the exception recorder fills.
    pub(crate) fn exceptions(&self) -> exceptions::Recorder<'_> {
        exceptions::Recorder {
            limiter: &self.limiter,
            throws: &self.throws,
            exception_counts: &self.exception_counts,
            gc: &self.gc,
        }
    }

    /// What the EventPipe recorder fills.
    pub(crate) fn eventpipe(&self) -> eventpipe::Recorder<'_> {
        eventpipe::Recorder {
            alloc_types: &self.alloc_types,
            alloc_samples: &self.alloc_samples,
            contention: &self.contention,
            limiter: &self.limiter,
            heap: &self.heap,
        }
    }

    /// What the exact allocation recorder fills.
    pub(crate) fn alloc(&self) -> alloc::Recorder<'_> {
        alloc::Recorder { alloc: &self.alloc, alloc_samples: &self.alloc_samples }
    }
}
