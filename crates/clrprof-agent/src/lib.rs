//! The clrprof agent: a shared library CoreCLR loads into the profiled process
//! (`CORECLR_PROFILER_PATH`). It answers `DllGetClassObject` with a class factory for one profiler
//! object, records what the runtime reports and streams it to a trace file or socket.
//!
//! Principles (docs/architecture.md): never harm the host — no panic crosses FFI (every entry
//! point is a `catch_unwind` shim in `clrprof-sys`), nothing on the app's stdout/stderr, no
//! blocking on hot paths, and the app keeps running when the trace sink is gone.
//!
//! # Modules
//!
//! From the bottom up (a module uses only modules above it in this list, or its own children):
//!
//! - `log`, `os` (the calling thread's tid, thread clocks, `/proc` reading), `activity` (the
//!   per-thread stack of runtime activity words), `config`, `signature`, `image_metadata`, `il`
//!   (method bodies read and rewritten), `names`, `writer` (the trace sink and its thread).
//! - `triggers` (collection triggers: what the runtime's threads observe, and the trigger thread
//!   that decides and acts through the closures it is given).
//! - `context`: what every recorder works in — runtime info, configuration, writer, names, the
//!   run's clock, `emit`. Recorders take a `&Context`, never the profiler's state.
//! - The recorders: `sampler` (CPU and wall-clock samples), `elt` (enter/leave hooks), `count`
//!   (call counts by IL probes),
//!   `events` (exceptions, GC, allocations, EventPipe; it asks the sampler for a last flush when
//!   the runtime fails fast).
//! - `profiler`: the profiler object — `Initialize`/`Shutdown`, the callbacks, attach sessions —
//!   whose state is the context plus the recorders. A new recorder is a module beside the others
//!   that takes a `&Context`, a field of `profiler::State`, and the callbacks that feed it.
//!
//! Everything is private to the crate; `bench` re-exports what the benchmarks drive.
//!
//! # Entry points and panics
//!
//! Every way the runtime or the kernel enters the agent, and what keeps a panic from harming the
//! process:
//!
//! - **Caught**: `DllGetClassObject`, every `ICorProfilerCallback` method (the shims in
//!   `clrprof_sys::callback` run each one under `catch_unwind`; a panic is logged and answered
//!   with `S_OK`, or `E_FAIL` from `Initialize`, which unloads the agent cleanly), and the
//!   `FunctionIDMapper2` callback (`elt::mapper`: a panic leaves the function unhooked). The panic
//!   hook writes panics from the agent's own sources to the agent's log, never to the app's stderr.
//! - **Written not to panic, not caught**: the enter/leave/tailcall paths (`elt::stubs`, naked
//!   assembly, and their Rust slow paths `elt::hooks::hook_enter/leave/tailcall`), the SIGPROF handler
//!   (`sampler::cpu::on_sigprof`) and the `DoStackSnapshot` frame callbacks (`sampler::wall`,
//!   `events`). A `catch_unwind` there would cost on every call, and unwinding cannot cross the
//!   JIT's frames or leave a signal handler. These paths check every pointer for null and every
//!   read against the thread's stack bounds, index only through checked accessors, use wrapping or
//!   saturating arithmetic (overflow checks are off for this crate in every profile). The hook
//!   paths and the signal handler neither allocate nor lock; the frame callbacks, which run on the
//!   walking thread outside any signal handler, only push into a vector bounded by a frame limit.
//!   Should one panic all the same, Rust aborts the process at the `extern` boundary (unwinding out
//!   of an `extern "C"`/`"system"` function aborts): a crash that is loud, never memory corruption.
//!   The signal handler also reads the thread's runtime activity (`activity::Activities::now`:
//!   atomic loads of a fixed array, index clamped), which the thread's own callbacks write through
//!   `sampler::slot::activity_begin/end` — caught callbacks, no allocation, one thread-local read.
//! - **Agent threads** (the writer, the sampler): a panic ends only that thread; the sampler's
//!   walks hold the runtime suspended through a guard that resumes it on every exit, unwinding
//!   included (`sampler::wall`), so the app never stays stopped.

pub(crate) mod activity;
pub(crate) mod config;
pub(crate) mod context;
pub(crate) mod count;
pub(crate) mod elt;
pub(crate) mod events;
pub(crate) mod il;
pub(crate) mod image_metadata;
pub(crate) mod log;
pub(crate) mod names;
pub(crate) mod os;
pub(crate) mod profiler;
pub(crate) mod rejit;
pub(crate) mod sampler;
pub(crate) mod signature;
pub(crate) mod triggers;
pub(crate) mod writer;

/// What the benchmarks in `benches/` drive, and nothing else: the library's interface is
/// `DllGetClassObject` and `DllCanUnloadNow`, every module is private to the crate.
#[doc(hidden)]
pub mod bench {
    pub use crate::elt::bench_support::{pair_cost_ns, rdtsc_cost_ns, stub_pair_cost_ns, thread_cpu_ns};
    pub use crate::writer::{Sink, Writer};
}

use std::ffi::c_void;

use clrprof_sys::{ClassFactory, GUID, HRESULT};

static FACTORY: ClassFactory = ClassFactory::new(profiler::make_profiler);

fn clsid() -> GUID {
    GUID::parse(clrprof_trace::AGENT_CLSID).unwrap_or(GUID::new(0, 0, 0, 0, 0))
}

/// The runtime's entry point into the agent.
///
/// # Safety
/// Called by CoreCLR with valid `clsid`/`iid` pointers and a writable `out`.
#[no_mangle]
pub unsafe extern "system" fn DllGetClassObject(
    clsid_in: *const GUID,
    iid: *const GUID,
    out: *mut *mut c_void,
) -> HRESULT {
    let r = std::panic::catch_unwind(|| {
        // Safety: forwarded from the runtime, checked inside.
        unsafe { FACTORY.get_class_object(&clsid(), clsid_in, iid, out) }
    });
    r.unwrap_or(clrprof_sys::E_FAIL)
}

/// The agent can never be unloaded (it may hold runtime callbacks until the process ends).
#[no_mangle]
pub extern "system" fn DllCanUnloadNow() -> HRESULT {
    clrprof_sys::S_FALSE
}
