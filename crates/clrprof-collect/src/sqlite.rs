//! The embedded store: one SQLite file (WAL mode, so `clrprof runs` and `report run:ID` read while
//! the collector writes). Schema in `docs/collector.md`.

use std::path::Path;
use std::sync::Mutex;

use rusqlite::{params, Connection, OptionalExtension};

use crate::{NewRun, RunEnd, RunId, RunInfo, RunState, RunStore, StoreError, StoreResult};

pub(crate) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS runs (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    host        TEXT    NOT NULL,
    pid         INTEGER NOT NULL,
    command     TEXT    NOT NULL,
    runtime     TEXT,
    start_ms    INTEGER NOT NULL,
    end_ms      INTEGER,
    exit_status INTEGER,
    bytes       INTEGER NOT NULL DEFAULT 0,
    state       TEXT    NOT NULL,
    reason      TEXT,
    collector   TEXT    NOT NULL
);
CREATE TABLE IF NOT EXISTS chunks (
    run    INTEGER NOT NULL REFERENCES runs(id),
    pos    INTEGER NOT NULL,
    data   BLOB    NOT NULL,
    PRIMARY KEY (run, pos)
);
";

pub struct SqliteStore {
    db: Mutex<Connection>,
}

const COLUMNS: &str = "id, host, pid, command, runtime, start_ms, end_ms, exit_status, bytes, state, reason";

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RunInfo> {
    let state = RunState::parse(&r.get::<_, String>(9)?);
    Ok(RunInfo {
        id: RunId(r.get(0)?),
        host: r.get(1)?,
        pid: r.get::<_, i64>(2)? as u32,
        command: r.get(3)?,
        runtime: r.get(4)?,
        start: r.get(5)?,
        end: r.get(6)?,
        exit_status: r.get(7)?,
        bytes: r.get::<_, i64>(8)? as u64,
        state,
        complete: state == RunState::Complete,
        reason: r.get(10)?,
    })
}

impl SqliteStore {
    /// Opens (creating if needed) the store file.
    pub fn open(path: &Path) -> StoreResult<SqliteStore> {
        let db = Connection::open(path)?;
        db.busy_timeout(std::time::Duration::from_secs(10))?;
        db.pragma_update(None, "journal_mode", "WAL")?;
        db.pragma_update(None, "synchronous", "NORMAL")?;
        db.execute_batch(SCHEMA)?;
        Ok(SqliteStore { db: Mutex::new(db) })
    }

    fn db(&self) -> StoreResult<std::sync::MutexGuard<'_, Connection>> {
        self.db.lock().map_err(|_| StoreError::Other("store lock poisoned".into()))
    }
}

impl RunStore for SqliteStore {
    fn create_run(&self, run: &NewRun) -> StoreResult<RunId> {
        let db = self.db()?;
        db.execute(
            "INSERT INTO runs (host, pid, command, runtime, start_ms, state, collector) VALUES (?1, ?2, ?3, ?4, ?5, 'running', ?6)",
            params![run.host, run.pid as i64, run.command, run.runtime, run.start, run.collector],
        )?;
        Ok(RunId(db.last_insert_rowid()))
    }

    fn append(&self, run: RunId, bytes: &[u8]) -> StoreResult<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        let mut db = self.db()?;
        let tx = db.transaction()?;
        let offset: i64 = tx.query_row("SELECT bytes FROM runs WHERE id = ?1", [run.0], |r| r.get(0))?;
        tx.execute("INSERT INTO chunks (run, pos, data) VALUES (?1, ?2, ?3)", params![run.0, offset, bytes])?;
        tx.execute("UPDATE runs SET bytes = bytes + ?2 WHERE id = ?1", params![run.0, bytes.len() as i64])?;
        tx.commit()?;
        Ok(())
    }

    fn finish(&self, run: RunId, end: &RunEnd) -> StoreResult<()> {
        self.db()?.execute(
            "UPDATE runs SET end_ms = ?2, state = ?3, reason = ?4 WHERE id = ?1",
            params![run.0, end.end, end.state.name(), end.reason],
        )?;
        Ok(())
    }

    fn set_exit(&self, host: &str, pid: u32, exit_status: i32, block: &[u8]) -> StoreResult<Option<RunId>> {
        let id: Option<i64> = self
            .db()?
            .query_row(
                "SELECT id FROM runs WHERE host = ?1 AND pid = ?2 ORDER BY id DESC LIMIT 1",
                params![host, pid as i64],
                |r| r.get(0),
            )
            .optional()?;
        let Some(id) = id else { return Ok(None) };
        self.append(RunId(id), block)?;
        self.db()?.execute("UPDATE runs SET exit_status = ?2 WHERE id = ?1", params![id, exit_status])?;
        Ok(Some(RunId(id)))
    }

    fn list(&self) -> StoreResult<Vec<RunInfo>> {
        let db = self.db()?;
        let mut st = db.prepare(&format!("SELECT {COLUMNS} FROM runs ORDER BY id"))?;
        let rows = st.query_map([], row)?.collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    fn get(&self, run: RunId) -> StoreResult<Option<RunInfo>> {
        let db = self.db()?;
        Ok(db.query_row(&format!("SELECT {COLUMNS} FROM runs WHERE id = ?1"), [run.0], row).optional()?)
    }

    fn read(&self, run: RunId, from: u64) -> StoreResult<Vec<u8>> {
        let db = self.db()?;
        let mut st =
            db.prepare("SELECT pos, data FROM chunks WHERE run = ?1 AND pos + length(data) > ?2 ORDER BY pos")?;
        let mut out = Vec::new();
        let mut rows = st.query(params![run.0, from as i64])?;
        while let Some(r) = rows.next()? {
            let offset = r.get::<_, i64>(0)? as u64;
            let data = r.get_ref(1)?.as_blob().map_err(rusqlite::Error::from)?;
            let skip = from.saturating_sub(offset) as usize;
            out.extend_from_slice(&data[skip.min(data.len())..]);
        }
        Ok(out)
    }

    fn recover(&self, collector: &str) -> StoreResult<usize> {
        let n = self.db()?.execute(
            "UPDATE runs SET state = 'cut_off', reason = 'the collector stopped while the run was streaming', \
             end_ms = COALESCE(end_ms, start_ms) WHERE state = 'running' AND collector = ?1",
            [collector],
        )?;
        Ok(n)
    }
}
