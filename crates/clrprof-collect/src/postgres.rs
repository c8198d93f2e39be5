//! The shared store: PostgreSQL through tokio-postgres (Debian packages no synchronous client),
//! driven by a private current-thread runtime inside the store, so callers stay synchronous.
//! Several collectors on several hosts can share one database. Schema in `docs/collector.md`.

use std::sync::Mutex;

use tokio::runtime::Runtime;
use tokio_postgres::{Client, NoTls, Row};

use crate::{NewRun, RunEnd, RunId, RunInfo, RunState, RunStore, StoreError, StoreResult};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS clrprof_runs (
    id          BIGSERIAL PRIMARY KEY,
    host        TEXT    NOT NULL,
    pid         BIGINT  NOT NULL,
    command     TEXT    NOT NULL,
    runtime     TEXT,
    start_ms    BIGINT  NOT NULL,
    end_ms      BIGINT,
    exit_status INTEGER,
    bytes       BIGINT  NOT NULL DEFAULT 0,
    state       TEXT    NOT NULL,
    reason      TEXT,
    collector   TEXT    NOT NULL
);
CREATE TABLE IF NOT EXISTS clrprof_chunks (
    run  BIGINT NOT NULL REFERENCES clrprof_runs(id),
    pos  BIGINT NOT NULL,
    data BYTEA  NOT NULL,
    PRIMARY KEY (run, pos)
);
";

const COLUMNS: &str = "id, host, pid, command, runtime, start_ms, end_ms, exit_status, bytes, state, reason";

pub struct PostgresStore {
    inner: Mutex<(Runtime, Client)>,
}

fn row(r: &Row) -> RunInfo {
    let state = RunState::parse(r.get::<_, &str>(9));
    RunInfo {
        id: RunId(r.get(0)),
        host: r.get(1),
        pid: r.get::<_, i64>(2) as u32,
        command: r.get(3),
        runtime: r.get(4),
        start: r.get(5),
        end: r.get(6),
        exit_status: r.get(7),
        bytes: r.get::<_, i64>(8) as u64,
        state,
        complete: state == RunState::Complete,
        reason: r.get(10),
    }
}

impl PostgresStore {
    /// Connects (`postgresql://user[:password]@host:port/db`, or libpq `key=value` settings) and
    /// creates the tables if missing.
    pub fn connect(url: &str) -> StoreResult<PostgresStore> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| StoreError::Other(format!("cannot start the PostgreSQL client runtime: {e}")))?;
        let client = rt.block_on(async {
            let (client, connection) = tokio_postgres::connect(url, NoTls).await?;
            tokio::spawn(async move {
                let _ = connection.await;
            });
            client.batch_execute(SCHEMA).await?;
            Ok::<_, tokio_postgres::Error>(client)
        })?;
        Ok(PostgresStore { inner: Mutex::new((rt, client)) })
    }

    fn with<T>(
        &self,
        f: impl for<'c> FnOnce(
            &'c mut Client,
        ) -> std::pin::Pin<
            Box<dyn std::future::Future<Output = Result<T, tokio_postgres::Error>> + 'c>,
        >,
    ) -> StoreResult<T> {
        let mut g = self.inner.lock().map_err(|_| StoreError::Other("store lock poisoned".into()))?;
        let (rt, client) = &mut *g;
        Ok(rt.block_on(f(client))?)
    }
}

impl RunStore for PostgresStore {
    fn create_run(&self, run: &NewRun) -> StoreResult<RunId> {
        let run = run.clone();
        self.with(move |c| {
            Box::pin(async move {
                let r = c
                    .query_one(
                        "INSERT INTO clrprof_runs (host, pid, command, runtime, start_ms, state, collector) \
                         VALUES ($1, $2, $3, $4, $5, 'running', $6) RETURNING id",
                        &[&run.host, &(run.pid as i64), &run.command, &run.runtime, &run.start, &run.collector],
                    )
                    .await?;
                Ok(RunId(r.get(0)))
            })
        })
    }

    fn append(&self, run: RunId, bytes: &[u8]) -> StoreResult<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        let data = bytes.to_vec();
        self.with(move |c| {
            Box::pin(async move {
                let tx = c.transaction().await?;
                let len = data.len() as i64;
                let r = tx
                    .query_one(
                        "UPDATE clrprof_runs SET bytes = bytes + $2 WHERE id = $1 RETURNING bytes - $2",
                        &[&run.0, &len],
                    )
                    .await?;
                let pos: i64 = r.get(0);
                tx.execute("INSERT INTO clrprof_chunks (run, pos, data) VALUES ($1, $2, $3)", &[&run.0, &pos, &data])
                    .await?;
                tx.commit().await
            })
        })
    }

    fn finish(&self, run: RunId, end: &RunEnd) -> StoreResult<()> {
        let end = end.clone();
        self.with(move |c| {
            Box::pin(async move {
                c.execute(
                    "UPDATE clrprof_runs SET end_ms = $2, state = $3, reason = $4 WHERE id = $1",
                    &[&run.0, &end.end, &end.state.name(), &end.reason],
                )
                .await
                .map(|_| ())
            })
        })
    }

    fn set_exit(&self, host: &str, pid: u32, exit_status: i32, block: &[u8]) -> StoreResult<Option<RunId>> {
        let host = host.to_string();
        let id: Option<i64> = self.with(move |c| {
            Box::pin(async move {
                let r = c
                    .query_opt(
                        "SELECT id FROM clrprof_runs WHERE host = $1 AND pid = $2 ORDER BY id DESC LIMIT 1",
                        &[&host, &(pid as i64)],
                    )
                    .await?;
                Ok(r.map(|r| r.get(0)))
            })
        })?;
        let Some(id) = id else { return Ok(None) };
        self.append(RunId(id), block)?;
        self.with(move |c| {
            Box::pin(async move {
                c.execute("UPDATE clrprof_runs SET exit_status = $2 WHERE id = $1", &[&id, &exit_status])
                    .await
                    .map(|_| ())
            })
        })?;
        Ok(Some(RunId(id)))
    }

    fn list(&self) -> StoreResult<Vec<RunInfo>> {
        self.with(|c| {
            Box::pin(async move {
                let rows = c.query(&format!("SELECT {COLUMNS} FROM clrprof_runs ORDER BY id"), &[]).await?;
                Ok(rows.iter().map(row).collect())
            })
        })
    }

    fn get(&self, run: RunId) -> StoreResult<Option<RunInfo>> {
        self.with(move |c| {
            Box::pin(async move {
                let r = c.query_opt(&format!("SELECT {COLUMNS} FROM clrprof_runs WHERE id = $1"), &[&run.0]).await?;
                Ok(r.as_ref().map(row))
            })
        })
    }

    fn read(&self, run: RunId, from: u64) -> StoreResult<Vec<u8>> {
        let from_i = from as i64;
        let rows = self.with(move |c| {
            Box::pin(async move {
                c.query(
                    "SELECT pos, data FROM clrprof_chunks WHERE run = $1 AND pos + length(data) > $2 ORDER BY pos",
                    &[&run.0, &from_i],
                )
                .await
            })
        })?;
        let mut out = Vec::new();
        for r in rows {
            let pos = r.get::<_, i64>(0) as u64;
            let data: &[u8] = r.get(1);
            let skip = from.saturating_sub(pos) as usize;
            out.extend_from_slice(&data[skip.min(data.len())..]);
        }
        Ok(out)
    }

    fn recover(&self, collector: &str) -> StoreResult<usize> {
        let collector = collector.to_string();
        self.with(move |c| {
            Box::pin(async move {
                c.execute(
                    "UPDATE clrprof_runs SET state = 'cut_off', reason = 'the collector stopped while the run was streaming', \
                     end_ms = COALESCE(end_ms, start_ms) WHERE state = 'running' AND collector = $1",
                    &[&collector],
                )
                .await
                .map(|n| n as usize)
            })
        })
    }
}
