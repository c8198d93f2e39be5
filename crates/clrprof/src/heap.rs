//! `clrprof heap PID`: a heap snapshot of a running process through the attach path. The agent
//! is attached with a snapshot-only configuration (no sampling, no runtime events,
//! `CLRPROF_HEAP_SNAPSHOT=1`), takes one snapshot before it reports the session started, and the
//! session is ended at once: the agent writes the trace and detaches, the process runs on. The
//! command then reads the snapshot back and says what it holds, or why it is incomplete.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::agent_env::HeapOptions;
use crate::attach::{attach, AttachOptions};

pub fn heap(
    pid: u32,
    output: Option<PathBuf>,
    agent: Option<PathBuf>,
    log: Option<PathBuf>,
    timeout: Duration,
) -> Result<()> {
    let output = match output {
        Some(p) => p,
        None => {
            let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            let name: String =
                name.trim().chars().map(|c| if c.is_alphanumeric() || "-_.".contains(c) { c } else { '_' }).collect();
            let secs =
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
            PathBuf::from(format!("{}-{pid}-{secs}.heap.clrprof", if name.is_empty() { "process" } else { &name }))
        }
    };
    let opts = AttachOptions {
        pid,
        // The snapshot is taken before the agent reports the session started: end it at once.
        duration: Some(Duration::ZERO),
        output: Some(output.clone()),
        agent,
        log,
        recording: HeapOptions::snapshot_only(),
        timeout,
        server: None,
        token: None,
    };
    attach(&opts)?;
    let snaps = clrprof_load::heap::heap_snapshots(clrprof_trace::TraceSource::File(output.clone()))
        .with_context(|| format!("cannot read the snapshot back from {}", output.display()))?;
    let Some(s) = snaps.last() else {
        bail!("the agent wrote no heap snapshot to {} (see the agent's diagnostics with --log FILE)", output.display());
    };
    if s.object_count() == 0 {
        bail!("process {pid} gave no heap snapshot: {}", s.info.reason);
    }
    eprintln!(
        "clrprof: heap snapshot: {} objects, {} bytes, {} references, {} roots; the process was paused {:.1} ms",
        s.object_count(),
        s.total_size(),
        s.edge_count(),
        s.roots().len(),
        s.info.pause_ns.unwrap_or(0) as f64 / 1e6
    );
    if !s.info.complete {
        eprintln!("clrprof: warning: the snapshot is INCOMPLETE ({}): its figures are lower bounds", s.info.reason);
    }
    eprintln!(
        "clrprof: `clrprof report {} --view types` lists its types; --view paths --type NAME shows what holds them",
        output.display()
    );
    Ok(())
}
