//! Exceptions: the throw (type, thread, managed stack) and every step of the two-pass handling.
//! .NET 9+ (managed exception handling) may repeat or leave unpaired unwind callbacks, so the
//! agent records each step as it comes and the model does the bookkeeping.

use clrprof_sys::{CallbackResult, FunctionID, ObjectID};
use clrprof_trace::{ExceptionPhase, ExceptionThrown};

use crate::profiler::{os_tid, State};

pub fn thrown(s: &State, object: ObjectID) -> CallbackResult {
    let class = s.info.get_class_from_object(object).unwrap_or(0);
    let type_name = s.names.class_name(class).to_string();
    let thread = s.info.get_current_thread_id().unwrap_or(0);
    let stack = super::current_stack(s);
    s.emit(ExceptionThrown {
        ts: s.now(),
        os_tid: os_tid(),
        thread: thread as u64,
        class: class as u64,
        type_name,
        stack,
    });
    Ok(())
}

pub fn phase(s: &State, phase: u8, function: FunctionID) -> CallbackResult {
    s.emit(ExceptionPhase { ts: s.now(), os_tid: os_tid(), phase, function: function as u64 });
    Ok(())
}
