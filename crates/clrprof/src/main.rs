//! `clrprof`: launch a .NET program under the profiler and turn its trace into reports.

mod agent_env;
mod attach;
mod cli;
mod collect;
mod container;
mod diff;
mod export;
mod heap;
mod heap_views;
mod ipc;
mod load;
mod record;
mod report;
mod view;

use std::process::ExitCode;

fn main() -> ExitCode {
    match cli::run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("clrprof: error: {e:#}");
            if let Some(hint) = cli::hint_for(&e) {
                eprintln!("clrprof: hint: {hint}");
            }
            ExitCode::from(2)
        }
    }
}
