//! SQLite's group committer drives its own writer connection directly
//! (rusqlite, the same SQLite library sqlx links), on its own thread.
//!
//! sqlx runs each SQLite statement on a worker thread and sends the result
//! back: two thread wake-ups per statement. A batch of writes is dozens of
//! statements run one after the other while every other writer waits, so
//! those wake-ups were most of a batch's time. Here a batch's statements run
//! back to back on the thread that owns the connection, and the only
//! hand-overs are the jobs in and the answers out.
//!
//! The store's code runs unchanged on this connection: [`DirectTx`] is an
//! [`Exec`] whose statements complete when called, so an `async` store
//! function over it finishes in one poll ([`run_now`]). Values are bound
//! and read exactly as sqlx binds and reads them (UUIDs as 16-byte blobs,
//! times as RFC 3339 text), so rows written here and there are the same.

use std::path::Path;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::{DateTime, SecondsFormat, Utc};
use rusqlite::types::Value as SqlValue;
use uuid::Uuid;

use crate::engine::{Col, Exec, Query, Row, Value};
use crate::metrics::StoreMetrics;
use crate::{Result, StoreError};

/// Opens a writer connection on `path` as the pool's are set up: write-ahead
/// log, full sync, foreign keys, a 30 s busy timeout.
pub(crate) fn open_writer(path: &Path) -> Result<rusqlite::Connection> {
    let conn = rusqlite::Connection::open(path).map_err(direct)?;
    conn.busy_timeout(Duration::from_secs(30)).map_err(direct)?;
    conn.pragma_update(None, "journal_mode", "wal").map_err(direct)?;
    conn.pragma_update(None, "synchronous", "full").map_err(direct)?;
    conn.pragma_update(None, "foreign_keys", "on").map_err(direct)?;
    conn.set_prepared_statement_cache_capacity(64);
    Ok(conn)
}

fn direct(error: rusqlite::Error) -> StoreError {
    StoreError::Database(sqlx::Error::Protocol(format!("sqlite: {error}")))
}

/// Runs a future whose every step completes when polled (a store function
/// over [`DirectTx`]) to its end, in one poll.
pub(crate) fn run_now<T>(work: impl Future<Output = Result<T>>) -> Result<T> {
    let mut work = pin!(work);
    match work.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(result) => result,
        Poll::Pending => Err(StoreError::Unsupported("a statement on the direct SQLite connection waited".into())),
    }
}

/// A write transaction on the direct connection (`BEGIN IMMEDIATE` …
/// `COMMIT`); dropped without [`DirectTx::commit`], it rolls back.
pub(crate) struct DirectTx<'c> {
    conn: &'c mut rusqlite::Connection,
    metrics: &'c StoreMetrics,
    open: bool,
}

impl<'c> DirectTx<'c> {
    pub(crate) fn begin(conn: &'c mut rusqlite::Connection, metrics: &'c StoreMetrics) -> Result<DirectTx<'c>> {
        let started = Instant::now();
        conn.execute_batch("BEGIN IMMEDIATE").map_err(direct)?;
        metrics.observe_step("begin", started.elapsed().as_secs_f64());
        Ok(DirectTx { conn, metrics, open: true })
    }

    pub(crate) fn commit(mut self) -> Result<()> {
        let started = Instant::now();
        self.conn.execute_batch("COMMIT").map_err(direct)?;
        self.open = false;
        self.metrics.observe_step("commit", started.elapsed().as_secs_f64());
        Ok(())
    }

    fn run(&mut self, query: Query<'_>, want_rows: bool) -> Result<(u64, Vec<OwnedRow>)> {
        let started = Instant::now();
        let (operation, table) = crate::metrics::classify(query.text());
        let result = run_statement(self.conn, query, want_rows);
        self.metrics
            .statements
            .get_or_create(&crate::metrics::StatementLabels { operation, table })
            .observe(started.elapsed().as_secs_f64());
        result
    }
}

impl Drop for DirectTx<'_> {
    fn drop(&mut self) {
        if self.open {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
    }
}

fn run_statement(conn: &rusqlite::Connection, query: Query<'_>, want_rows: bool) -> Result<(u64, Vec<OwnedRow>)> {
    let (text, args) = query.into_parts();
    let mut statement = conn.prepare_cached(&text).map_err(direct)?;
    for index in 1..=statement.parameter_count() {
        // `$n` is a named parameter to SQLite, numbered in order of first
        // use: bind by name, as sqlx does.
        let name = statement.parameter_name(index).unwrap_or_default();
        let n: usize = name.strip_prefix('$').and_then(|n| n.parse().ok()).unwrap_or(0);
        let value = n.checked_sub(1).and_then(|n| args.get(n)).ok_or_else(|| StoreError::Corrupt(format!("parameter {name:?} unbound")))?;
        statement.raw_bind_parameter(index, to_sql(value)?).map_err(direct)?;
    }
    if statement.column_count() == 0 {
        let changed = statement.raw_execute().map_err(direct)?;
        return Ok((changed as u64, Vec::new()));
    }
    let names: Arc<[String]> = statement.column_names().into_iter().map(str::to_owned).collect();
    let mut rows = statement.raw_query();
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(direct)? {
        if want_rows {
            let values = (0..names.len()).map(|i| row.get::<_, SqlValue>(i)).collect::<rusqlite::Result<Vec<_>>>().map_err(direct)?;
            out.push(OwnedRow { names: names.clone(), values });
        }
    }
    Ok((out.len() as u64, out))
}

/// A value bound as sqlx binds it to SQLite (which has no arrays).
fn to_sql(value: &Value<'_>) -> Result<SqlValue> {
    Ok(match value {
        Value::Int(v) => v.map_or(SqlValue::Null, SqlValue::Integer),
        Value::Int4(v) => v.map_or(SqlValue::Null, |v| SqlValue::Integer(v.into())),
        Value::Bool(v) => v.map_or(SqlValue::Null, |v| SqlValue::Integer(v.into())),
        Value::Text(v) => v.as_ref().map_or(SqlValue::Null, |v| SqlValue::Text(v.to_string())),
        Value::Bytes(v) => v.as_ref().map_or(SqlValue::Null, |v| SqlValue::Blob(v.to_vec())),
        Value::Uuid(v) => v.map_or(SqlValue::Null, |v| SqlValue::Blob(v.as_bytes().to_vec())),
        Value::Time(v) => v.map_or(SqlValue::Null, |v| SqlValue::Text(v.to_rfc3339_opts(SecondsFormat::AutoSi, false))),
        Value::Array(array) => return Err(array.unsupported()),
    })
}

/// A row read off the direct connection.
pub(crate) struct OwnedRow {
    names: Arc<[String]>,
    values: Vec<SqlValue>,
}

impl OwnedRow {
    fn value(&self, col: Col<'_>) -> Result<&SqlValue> {
        let index = match col {
            Col::Index(i) => Some(i),
            Col::Name(name) => self.names.iter().position(|n| n == name),
        };
        index.and_then(|i| self.values.get(i)).ok_or_else(|| StoreError::Corrupt(format!("no column {col}")))
    }

    fn wrong(&self, col: Col<'_>, kind: &str) -> StoreError {
        StoreError::Corrupt(format!("{col} is not {kind}"))
    }
}

impl Row for OwnedRow {
    fn read_i64(&self, col: Col<'_>) -> Result<Option<i64>> {
        match self.value(col)? {
            SqlValue::Null => Ok(None),
            SqlValue::Integer(v) => Ok(Some(*v)),
            _ => Err(self.wrong(col, "an integer")),
        }
    }
    fn read_i32(&self, col: Col<'_>) -> Result<Option<i32>> {
        self.read_i64(col)?.map(|v| i32::try_from(v).map_err(|_| self.wrong(col, "a 32-bit integer"))).transpose()
    }
    fn read_bool(&self, col: Col<'_>) -> Result<Option<bool>> {
        Ok(self.read_i64(col)?.map(|v| v != 0))
    }
    fn read_text(&self, col: Col<'_>) -> Result<Option<String>> {
        match self.value(col)? {
            SqlValue::Null => Ok(None),
            SqlValue::Text(v) => Ok(Some(v.clone())),
            _ => Err(self.wrong(col, "text")),
        }
    }
    fn read_bytes(&self, col: Col<'_>) -> Result<Option<Vec<u8>>> {
        match self.value(col)? {
            SqlValue::Null => Ok(None),
            SqlValue::Blob(v) => Ok(Some(v.clone())),
            _ => Err(self.wrong(col, "a blob")),
        }
    }
    fn read_uuid(&self, col: Col<'_>) -> Result<Option<Uuid>> {
        self.read_bytes(col)?.map(|b| Uuid::from_slice(&b).map_err(|_| self.wrong(col, "a UUID"))).transpose()
    }
    fn read_time(&self, col: Col<'_>) -> Result<Option<DateTime<Utc>>> {
        self.read_text(col)?
            .map(|t| {
                DateTime::parse_from_rfc3339(&t)
                    .map(|t| t.with_timezone(&Utc))
                    .or_else(|_| chrono::NaiveDateTime::parse_from_str(&t, "%Y-%m-%d %H:%M:%S%.f").map(|t| t.and_utc()))
                    .map_err(|_| self.wrong(col, "a time"))
            })
            .transpose()
    }
}

#[async_trait]
impl Exec for DirectTx<'_> {
    type Row = OwnedRow;
    async fn execute(&mut self, query: Query<'_>) -> Result<u64> {
        Ok(self.run(query, false)?.0)
    }
    async fn fetch_all(&mut self, query: Query<'_>) -> Result<Vec<OwnedRow>> {
        Ok(self.run(query, true)?.1)
    }
    async fn fetch_optional(&mut self, query: Query<'_>) -> Result<Option<OwnedRow>> {
        Ok(self.run(query, true)?.1.into_iter().next())
    }
}
