//! The task library's events (`System.Threading.Tasks.TplEventSource`) for logical async stacks
//! (`CLRPROF_ASYNC=1`).

use clrprof_sys::CallbackResult;

use super::providers::{Delivered, ProviderRequest, TASKS};
use crate::config::Config;
use crate::context::Context;

/// `Tasks` (0x2): TaskScheduled, TaskStarted, TaskWaitBegin, TaskWaitEnd (verbose).
pub(crate) const KEYWORD_TASKS: u64 = 0x2;
/// `AsyncCausalityOperation` (0x8): TraceOperationBegin names a task (`Task.Delay`, `Async: <M>d__4`).
pub(crate) const KEYWORD_CAUSALITY_OPERATION: u64 = 0x8;
/// `TaskStops` (0x40): TaskCompleted, TaskWaitContinuationComplete.
pub(crate) const KEYWORD_TASK_STOPS: u64 = 0x40;
/// `TasksFlowActivityIds` (0x80): EventSource activity ids flow from a task to those it creates.
pub(crate) const KEYWORD_FLOW_ACTIVITY_IDS: u64 = 0x80;
const LEVEL_VERBOSE: u32 = 5;

/// Task events waiting for the writer thread.
#[derive(Default)]
pub(crate) struct TaskEvents {}

/// The providers this module needs for `config`.
pub(crate) fn providers(config: &Config, _runtime_major: u16) -> Vec<ProviderRequest> {
    if !config.asynchrony {
        return Vec::new();
    }
    let keywords = KEYWORD_TASKS | KEYWORD_CAUSALITY_OPERATION | KEYWORD_TASK_STOPS | KEYWORD_FLOW_ACTIVITY_IDS;
    vec![ProviderRequest { name: TASKS, keywords, level: LEVEL_VERBOSE }]
}

/// A task event, delivered on the thread that wrote it.
pub(crate) fn delivered(_s: &Context, _t: &TaskEvents, _e: &Delivered) -> CallbackResult {
    Ok(())
}
