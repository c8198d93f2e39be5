//! Runs of a collector's store as trace sources: `run:ID` and `run:latest` name a run wherever a
//! reader takes a trace file; the store is an SQLite file or a `postgresql://` URL.

use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clrprof_collect::{open_store, RunId, RunInfo, RunState, RunStore, DEFAULT_STORE};
use clrprof_trace::TraceSource;

/// The store to use: the one given, else the default file in the working directory.
pub fn store_spec(store: Option<&str>) -> String {
    store.map(str::to_string).unwrap_or_else(|| DEFAULT_STORE.to_string())
}

/// Opens a store to read: an SQLite file must exist (a typo is not a new, empty store).
pub fn open(store: Option<&str>) -> Result<Arc<dyn RunStore>> {
    let spec = store_spec(store);
    if !spec.contains("://") && !Path::new(&spec).is_file() {
        bail!("no run store at {spec}: run `clrprof collect` there first, or pass --store PATH|postgresql://…");
    }
    open_store(&spec).with_context(|| format!("cannot open the run store {}", redact(&spec)))
}

/// A store URL without its password, for messages.
pub fn redact(spec: &str) -> String {
    match (spec.find("://"), spec.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let cred = &spec[s + 3..at];
            match cred.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &spec[..s + 3], &spec[at..]),
                None => spec.to_string(),
            }
        }
        _ => spec.to_string(),
    }
}

/// `run:ID` or `run:latest`, if `trace` names a run.
pub fn run_spec(trace: &Path) -> Option<&str> {
    trace.to_str().and_then(|s| s.strip_prefix("run:"))
}

/// The trace of a run as a source, with warnings to print (still streaming, cut off).
pub fn run_source(spec: &str, store: Option<&str>) -> Result<(TraceSource, RunInfo, Vec<String>)> {
    let s = open(store)?;
    let run = if spec == "latest" {
        s.latest()?.with_context(|| format!("the run store {} holds no runs", redact(&store_spec(store))))?
    } else {
        let id: i64 = match spec.parse() {
            Ok(id) => id,
            Err(_) => bail!("`run:{spec}`: expected run:ID (a number, see `clrprof runs`) or run:latest"),
        };
        s.get(RunId(id))?
            .with_context(|| format!("no run {id} in the store {} (see `clrprof runs`)", redact(&store_spec(store))))?
    };
    let bytes = s.read(run.id, 0)?;
    let mut warnings = Vec::new();
    match run.state {
        RunState::Running => warnings.push(format!("run {} is still streaming; this is what arrived so far", run.id)),
        RunState::CutOff => warnings.push(format!(
            "run {} was cut off ({}); read up to the cut",
            run.id,
            run.reason.as_deref().unwrap_or("unknown reason")
        )),
        RunState::Complete => {}
    }
    Ok((TraceSource::Bytes(bytes), run, warnings))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_and_redaction() {
        assert_eq!(redact("postgresql://u:pw@h:5/db"), "postgresql://u:***@h:5/db");
        assert_eq!(redact("runs.db"), "runs.db");
        assert_eq!(run_spec(Path::new("run:latest")), Some("latest"));
        assert_eq!(run_spec(Path::new("a.clrprof")), None);
        assert_eq!(store_spec(None), DEFAULT_STORE);
    }
}
