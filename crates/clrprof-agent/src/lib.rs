//! The clrprof agent: a shared library CoreCLR loads into the profiled process
//! (`CORECLR_PROFILER_PATH`). It answers `DllGetClassObject` with a class factory for one profiler
//! object, records what the runtime reports and streams it to a trace file or socket.
//!
//! Principles (DESIGN.md): never harm the host — no panic crosses FFI (every entry point is a
//! `catch_unwind` shim in `clrprof-sys`), nothing on the app's stdout/stderr, no blocking on hot
//! paths, and the app keeps running when the trace sink is gone.

pub mod config;
pub mod elt;
pub mod events;
pub mod log;
pub mod names;
pub mod profiler;
pub mod sampler;
pub mod signature;
pub mod writer;

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};

use clrprof_sys::{ClassFactory, ComObject, GUID, HRESULT};

static CREATED: AtomicBool = AtomicBool::new(false);

fn make_profiler() -> Option<*mut c_void> {
    // One profiler per process: a second CreateInstance politely declines.
    if CREATED.swap(true, Ordering::AcqRel) {
        return None;
    }
    Some(ComObject::create(profiler::Profiler::new()))
}

static FACTORY: ClassFactory = ClassFactory::new(make_profiler);

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
