//! The clrprof collector: agents started with `CLRPROF_SERVER` (or `clrprof record --server`) stream
//! their trace over TCP; each stream becomes a *run* kept in a [`RunStore`] (embedded SQLite or a
//! shared PostgreSQL), readable while it grows and after a collector restart. Sinks (a Pyroscope
//! pusher, …) see every run as it arrives through [`RunObserver`]. Protocol and schema:
//! `docs/collector.md`.

mod postgres;
mod server;
mod sqlite;
pub mod tls;

use std::sync::Arc;

pub use clrprof_trace::wire::hostname;
pub use postgres::PostgresStore;
pub use server::{Collector, CollectorBuilder, CollectorHandle, StartError};
pub use sqlite::SqliteStore;

/// A run's id in its store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct RunId(pub i64);

impl std::fmt::Display for RunId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Where a run stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// Its stream is still arriving.
    Running,
    /// The agent stopped cleanly and the stream ended on a block boundary.
    Complete,
    /// The stream ended early (agent killed, collector stopped, malformed data, size limit): the
    /// stored trace is readable up to the cut.
    CutOff,
}

impl RunState {
    pub fn name(self) -> &'static str {
        match self {
            RunState::Running => "running",
            RunState::Complete => "complete",
            RunState::CutOff => "cut_off",
        }
    }

    fn parse(s: &str) -> RunState {
        match s {
            "running" => RunState::Running,
            "complete" => RunState::Complete,
            _ => RunState::CutOff,
        }
    }
}

/// One run: who was profiled, when, and how its stream ended.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct RunInfo {
    pub id: RunId,
    pub host: String,
    pub pid: u32,
    pub command: String,
    /// The runtime version the agent reported, when known.
    pub runtime: Option<String>,
    /// Unix time in milliseconds when the collector accepted the stream.
    pub start: i64,
    /// Unix time in milliseconds when the stream ended; `None` while running.
    pub end: Option<i64>,
    /// The process's exit code (`-signal - 1` for a signal) when `clrprof record` reported it.
    pub exit_status: Option<i32>,
    /// Trace bytes stored (whole blocks only).
    pub bytes: u64,
    pub state: RunState,
    /// `state == Complete`.
    pub complete: bool,
    /// Why the run was cut off, if it was.
    pub reason: Option<String>,
}

/// A sink that sees every run as it arrives (a Pyroscope pusher, a live view, …).
///
/// The collector calls these on the connection's thread, between reading the stream and storing
/// it: **an implementation must not block** — queue the work (a bounded channel to a thread of its
/// own) and return. A panic in an observer is caught and logged; the run goes on.
pub trait RunObserver: Send + Sync {
    /// A stream was accepted: id, host, pid, command, runtime version if known, start.
    fn run_started(&self, run: &RunInfo);
    /// Raw trace bytes as they arrive, in order: the trace header first, then whole blocks only
    /// (exactly what is stored), so a [`clrprof_trace::StreamDecoder`] can be fed directly.
    fn run_data(&self, run: RunId, bytes: &[u8]);
    /// The stream ended; `complete` false when it was cut off.
    fn run_ended(&self, run: RunId, complete: bool);
}

/// What the collector knows when a stream is accepted.
#[derive(Clone, Debug, Default)]
pub struct NewRun {
    pub host: String,
    pub pid: u32,
    pub command: String,
    pub runtime: Option<String>,
    pub start: i64,
    /// Which collector holds the stream (so a restart marks only its own open runs as cut off).
    pub collector: String,
}

/// How a run ended.
#[derive(Clone, Debug)]
pub struct RunEnd {
    pub end: i64,
    pub state: RunState,
    pub reason: Option<String>,
}

/// Store errors.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("SQLite store: {0}")]
    Sqlite(rusqlite::Error),
    #[error("PostgreSQL store: {0}")]
    Postgres(tokio_postgres::Error),
    #[error("{0}")]
    Other(String),
}

// The messages above include their cause, so `source()` stays unset: an error chain printed with
// `{:#}` would say it twice.
impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        StoreError::Sqlite(e)
    }
}

impl From<tokio_postgres::Error> for StoreError {
    fn from(e: tokio_postgres::Error) -> Self {
        StoreError::Postgres(e)
    }
}

pub type StoreResult<T> = Result<T, StoreError>;

/// Where runs are kept. Trace bytes are appended in chunks as they arrive, so a run in progress
/// is readable as it grows; everything a call returns is committed.
pub trait RunStore: Send + Sync {
    fn create_run(&self, run: &NewRun) -> StoreResult<RunId>;
    /// Appends whole blocks (the first chunk starts with the trace header).
    fn append(&self, run: RunId, bytes: &[u8]) -> StoreResult<()>;
    fn finish(&self, run: RunId, end: &RunEnd) -> StoreResult<()>;
    /// Records the exit status `clrprof record` reported for the newest run of `host`/`pid`, and
    /// appends `block` (a `ProcessExit` record) to its trace. Returns the run, if one matched.
    fn set_exit(&self, host: &str, pid: u32, exit_status: i32, block: &[u8]) -> StoreResult<Option<RunId>>;
    /// Every run, oldest first.
    fn list(&self) -> StoreResult<Vec<RunInfo>>;
    fn get(&self, run: RunId) -> StoreResult<Option<RunInfo>>;
    /// The run's trace bytes stored so far, from byte `from` on.
    fn read(&self, run: RunId, from: u64) -> StoreResult<Vec<u8>>;
    /// Marks the runs `collector` left running (it stopped without ending them) as cut off.
    fn recover(&self, collector: &str) -> StoreResult<usize>;
}

impl dyn RunStore {
    /// The newest run (highest id).
    pub fn latest(&self) -> StoreResult<Option<RunInfo>> {
        Ok(self.list()?.into_iter().max_by_key(|r| r.id))
    }
}

/// Follows a run as it grows (a live view): each [`RunTail::poll`] returns the trace bytes stored
/// since the previous one — whole blocks, the header first — to feed a
/// [`clrprof_trace::StreamDecoder`].
pub struct RunTail {
    store: Arc<dyn RunStore>,
    run: RunId,
    offset: u64,
}

impl RunTail {
    pub fn new(store: Arc<dyn RunStore>, run: RunId) -> RunTail {
        RunTail { store, run, offset: 0 }
    }

    /// New bytes (empty when nothing arrived), and the run as it stands now.
    pub fn poll(&mut self) -> StoreResult<(Vec<u8>, Option<RunInfo>)> {
        // Read the state first: bytes stored before it said "ended" are all there is.
        let info = self.store.get(self.run)?;
        let bytes = self.store.read(self.run, self.offset)?;
        self.offset += bytes.len() as u64;
        Ok((bytes, info))
    }
}

/// Opens a store: a `postgresql://…` (or `postgres://…`) URL, else an SQLite file path (created if
/// missing).
pub fn open_store(spec: &str) -> StoreResult<Arc<dyn RunStore>> {
    if spec.starts_with("postgresql://") || spec.starts_with("postgres://") {
        Ok(Arc::new(PostgresStore::connect(spec)?))
    } else {
        Ok(Arc::new(SqliteStore::open(std::path::Path::new(spec))?))
    }
}

/// The default store: `clrprof-runs.db` in the working directory.
pub const DEFAULT_STORE: &str = "clrprof-runs.db";

/// Unix time in milliseconds.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// Compares two secrets in time that depends only on their lengths, not on where they differ.
pub fn tokens_equal(a: &[u8], b: &[u8]) -> bool {
    let mut diff = (a.len() ^ b.len()) as u8 | ((a.len() ^ b.len()) >> 8) as u8;
    let n = a.len().max(b.len());
    for i in 0..n {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0xff);
        diff |= x ^ y;
    }
    std::hint::black_box(diff) == 0 && a.len() == b.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_comparison() {
        assert!(tokens_equal(b"abc", b"abc"));
        assert!(!tokens_equal(b"abc", b"abd"));
        assert!(!tokens_equal(b"abc", b"ab"));
        assert!(!tokens_equal(b"", b"a"));
        assert!(tokens_equal(b"", b""));
        let long = vec![b'x'; 300];
        let mut other = long.clone();
        other.truncate(44);
        assert!(!tokens_equal(&long, &other));
    }
}
