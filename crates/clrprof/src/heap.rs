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
    max_memory_mb: Option<u64>,
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
    let mut recording = HeapOptions::snapshot_only();
    recording.heap.buffer_mb = max_memory_mb;
    let opts = AttachOptions {
        pid,
        // The snapshot is taken before the agent reports the session started: end it at once.
        duration: Some(Duration::ZERO),
        output: Some(output.clone()),
        agent,
        log,
        recording,
        timeout,
        server: None,
        token: None,
        tls: Default::default(),
        count: Vec::new(),
        count_top: None,
        count_after: Duration::ZERO,
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
        "clrprof: heap snapshot: {} objects, {} bytes, {} references, {} roots; the process was paused {:.1} ms ({:.1} ms of it in the agent)",
        s.object_count(),
        s.total_size(),
        s.edge_count(),
        s.roots().len(),
        s.info.pause_ns.unwrap_or(0) as f64 / 1e6,
        agent_ms(&output)
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

/// The time the agent spent taking the last snapshot's events, from its end record, in ms.
fn agent_ms(trace: &std::path::Path) -> f64 {
    let Ok(mut r) = clrprof_trace::TraceReader::open(clrprof_trace::TraceSource::File(trace.to_path_buf())) else {
        return 0.0;
    };
    let mut ns = 0;
    while let Ok(n) = r.poll_each(|rec| {
        if let clrprof_trace::Record::HeapSnapshotEnd(e) = rec {
            ns = e.agent_ns;
        }
    }) {
        if n == 0 && r.at_end() {
            break;
        }
    }
    ns as f64 / 1e6
}
