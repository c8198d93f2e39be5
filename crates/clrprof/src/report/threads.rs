//! `--thread ID|NAME`: OS thread id, runtime ThreadID (`0x…`) or thread name.

use anyhow::{bail, Result};
use clrprof_model::Profile;

/// OS tids selected by `--thread` (`None` = all threads).
pub fn select(p: &Profile, spec: Option<&str>) -> Result<Option<Vec<u32>>> {
    let Some(spec) = spec else { return Ok(None) };
    let spec = spec.trim();
    if let Some(hex) = spec.strip_prefix("0x") {
        if let Ok(id) = u64::from_str_radix(hex, 16) {
            if let Some(t) = p.threads.iter().find(|t| t.id == id).and_then(|t| t.os_tid) {
                return Ok(Some(vec![t]));
            }
        }
    }
    if let Ok(tid) = spec.parse::<u32>() {
        if p.costs.threads.iter().any(|t| t.os_tid == tid) || p.thread_by_os_tid(tid).is_some() {
            return Ok(Some(vec![tid]));
        }
    }
    let named: Vec<u32> = p
        .threads
        .iter()
        .filter(|t| t.name == spec || t.names.iter().any(|(_, n)| n == spec))
        .filter_map(|t| t.os_tid)
        .collect();
    if named.is_empty() {
        bail!("no thread {spec:?} in this trace (give an OS thread id, a ThreadID as 0x…, or a thread name)");
    }
    Ok(Some(named))
}
