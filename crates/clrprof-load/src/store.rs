//! Runs of a collector's store as trace sources: `run:ID` and `run:latest` name a run wherever a
//! reader takes a trace file; the store is an SQLite file or a `postgresql://` URL.

use std::path::Path;
use std::sync::Arc;

use clrprof_collect::{open_store, RunId, RunInfo, RunState, RunStore, StoreError, DEFAULT_STORE};
use clrprof_trace::TraceSource;

/// Why a run cannot be read from a store. Messages are complete sentences for the user.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("no run store at {0}: run `clrprof collect` there first, or pass --store PATH|postgresql://…")]
    NoStore(String),
    /// The store (named without its password) exists but cannot be opened.
    #[error("cannot open the run store {spec}")]
    Open {
        spec: String,
        #[source]
        error: StoreError,
    },
    #[error("the run store {0} holds no runs")]
    NoRuns(String),
    #[error("`run:{0}`: expected run:ID (a number, see `clrprof runs`) or run:latest")]
    BadSpec(String),
    #[error("no run {id} in the store {store} (see `clrprof runs`)")]
    NoSuchRun { id: i64, store: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

type Result<T, E = RunError> = std::result::Result<T, E>;

/// The store to use: the one given, else the default file in the working directory.
pub fn store_spec(store: Option<&str>) -> String {
    store.map(str::to_string).unwrap_or_else(|| DEFAULT_STORE.to_string())
}

/// Opens a store to read: an SQLite file must exist (a typo is not a new, empty store).
pub fn open(store: Option<&str>) -> Result<Arc<dyn RunStore>> {
    let spec = store_spec(store);
    if !spec.contains("://") && !Path::new(&spec).is_file() {
        return Err(RunError::NoStore(spec));
    }
    open_store(&spec).map_err(|error| RunError::Open { spec: redact(&spec), error })
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
        s.latest()?.ok_or_else(|| RunError::NoRuns(redact(&store_spec(store))))?
    } else {
        let id: i64 = spec.parse().map_err(|_| RunError::BadSpec(spec.to_string()))?;
        s.get(RunId(id))?.ok_or_else(|| RunError::NoSuchRun { id, store: redact(&store_spec(store)) })?
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
