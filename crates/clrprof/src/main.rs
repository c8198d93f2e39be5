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
    map_large_blocks();
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

/// Has the allocator map every block of 1 MiB or more on its own, rather than take blocks below
/// glibc's sliding threshold (up to 32 MiB) from the heap. Reading a large trace grows columns of
/// tens of megabytes by a quarter at a time (`clrprof_model`'s `grow`) and frees the reader's
/// tables once the profile is built: mapped blocks grow in place and go back to the system when
/// freed, where the heap copied them and kept what was freed (the peak resident set of a 757.6 MiB
/// instrumented trace's `report --view summary`: 715 MiB, 602 MiB mapped). A
/// `MALLOC_MMAP_THRESHOLD_` the user set is left to glibc.
fn map_large_blocks() {
    if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_some() {
        return;
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt changes one malloc setting; called first thing, before any other thread runs.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
    }
}
