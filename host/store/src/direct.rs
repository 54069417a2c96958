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

use std::path::{Path, PathBuf};
use std::pin::pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::{DateTime, SecondsFormat, Utc};
use rusqlite::types::Value as SqlValue;
use uuid::Uuid;

use crate::engine::{Col, Exec, Query, Row, Value, WAL_PAGES};
use crate::metrics::StoreMetrics;
use crate::{Result, StoreError};

/// Opens a writer connection on `path` as the pool's are set up: write-ahead
/// log, full sync, foreign keys, waits of up to 30 s for the write lock
/// ([`writer_waits`]).
pub(crate) fn open_writer(path: &Path) -> Result<rusqlite::Connection> {
    let conn = rusqlite::Connection::open(path).map_err(direct)?;
    conn.busy_handler(Some(writer_waits)).map_err(direct)?;
    conn.pragma_update(None, "journal_mode", "wal").map_err(direct)?;
    conn.pragma_update(None, "synchronous", "full").map_err(direct)?;
    conn.pragma_update(None, "foreign_keys", "on").map_err(direct)?;
    // A statement that may fail half-way inside a batch (a savepoint's, a
    // trigger's) keeps its undo in a statement journal: a temporary file
    // created and deleted for each such statement unless temporary data
    // stays in memory (a profile of x402-paid batches found the committer
    // creating and unlinking files). It holds the pages of one statement.
    conn.pragma_update(None, "temp_store", "memory").map_err(direct)?;
    conn.pragma_update(None, "wal_autocheckpoint", WAL_PAGES).map_err(direct)?;
    conn.set_prepared_statement_cache_capacity(64);
    Ok(conn)
}

/// How the committer and the background writer wait for the write lock
/// another connection holds: `attempt` counts the waits so far. SQLite's own busy timeout sleeps 1, 2, 5, 10 … 100 ms
/// between tries, so a batch that found the lock taken for 50 us waited a
/// millisecond or more, while every write queued behind it waited too (a
/// profile of paid runs put the committer's BEGIN at 0.7-1 ms on average).
/// Here the waits start at 50 us and double up to 1 ms; the writer gives up
/// (SQLITE_BUSY) after about 30 s, as the pool's connections do.
fn writer_waits(attempt: i32) -> bool {
    const GIVE_UP: i32 = 5 + 30_000;
    if attempt >= GIVE_UP {
        return false;
    }
    let micros = if attempt < 5 { 50u64 << attempt } else { 1_000 };
    std::thread::sleep(Duration::from_micros(micros));
    true
}

fn direct(error: rusqlite::Error) -> StoreError {
    // SQLITE_CONSTRAINT_UNIQUE and SQLITE_CONSTRAINT_PRIMARYKEY: told apart,
    // as the pool's errors are, so a used key is a refusal and not a failure.
    if let rusqlite::Error::SqliteFailure(failure, _) = &error
        && matches!(failure.extended_code, rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE | rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY)
    {
        return StoreError::UniqueKey(error.to_string());
    }
    StoreError::Database(format!("sqlite: {error}"))
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

/// The background jobs' write transactions on SQLite (the log's
/// integration, ARA's fold, checkpoints, the integrator's lease), each run
/// whole on the calling thread on a writer connection of their own.
///
/// On the pool, a transaction holds SQLite's one write lock from its
/// `BEGIN IMMEDIATE` to its `COMMIT`, and each statement between is a
/// hand-over to sqlx's worker thread and back to a runtime thread: under
/// load, where the runtime's threads are busy serving requests, each of
/// those returns waits its turn, and the group committer, which needs the
/// same lock for every batch, waited with it (a profile of paid runs: the
/// committer's BEGIN 0.7-1 ms on average, up to 0.5 s, near half its time).
/// Here the statements run back to back while the lock is held, so the
/// lock is held for their work and the commit's sync only. The runtime
/// thread is handed over for it (`block_in_place`): a multi-threaded
/// runtime is needed, and without one the caller runs on the pool.
pub(crate) struct Writer {
    file: PathBuf,
    /// The connection, opened when first needed; `None` inside once closed.
    conn: Mutex<Option<Option<rusqlite::Connection>>>,
}

impl Writer {
    pub(crate) fn new(file: &Path) -> Writer {
        Writer { file: file.to_path_buf(), conn: Mutex::new(Some(None)) }
    }

    /// Runs `work` as one transaction, committed if it returns `Ok`;
    /// `None` if it cannot run here (closed, or no multi-threaded runtime).
    pub(crate) fn write<T>(&self, metrics: &StoreMetrics, work: impl FnOnce(&mut DirectTx<'_>) -> Result<T>) -> Option<Result<T>> {
        let flavor = tokio::runtime::Handle::try_current().ok()?.runtime_flavor();
        if flavor != tokio::runtime::RuntimeFlavor::MultiThread {
            return None;
        }
        tokio::task::block_in_place(|| {
            let mut guard = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
            let slot = guard.as_mut()?;
            if slot.is_none() {
                match open_writer(&self.file) {
                    Ok(conn) => *slot = Some(conn),
                    Err(error) => return Some(Err(error)),
                }
            }
            let conn = slot.as_mut()?;
            Some(DirectTx::begin(conn, metrics).and_then(|mut tx| {
                let done = work(&mut tx)?;
                tx.commit()?;
                Ok(done)
            }))
        })
    }

    /// Closes the connection; transactions after this run on the pool.
    pub(crate) fn close(&self) {
        self.conn.lock().unwrap_or_else(PoisonError::into_inner).take();
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
        timed_statement(self.conn, self.metrics, query, want_rows)
    }
}

/// Runs one statement, counted in the store's statement metrics.
fn timed_statement(conn: &rusqlite::Connection, metrics: &StoreMetrics, query: Query<'_>, want_rows: bool) -> Result<(u64, Vec<OwnedRow>)> {
    let started = Instant::now();
    let label = query.metrics_label();
    let result = run_statement(conn, query, want_rows);
    metrics.observe_statement(label, started.elapsed().as_secs_f64());
    result
}

/// The hot path's reads on SQLite (the agent a bearer token names, a
/// declaration by dd_id), each one statement on a connection of its own,
/// run where it is asked for.
///
/// On the pool, each read was a hand-over to sqlx's worker thread and back
/// (with a check of the connection before it): two or more thread wake-ups
/// for a lookup by key that SQLite answers from its page cache in tens of
/// microseconds. Here the statement runs on the calling thread, which does
/// not wait for anything else: in write-ahead-log mode a reader never waits
/// for the writer or for a checkpoint. Only a database that is briefly busy
/// (a log being reset or recovered) could make it wait, so the wait is short
/// ([`READER_BUSY`]); a read that fails here for any reason is run again on
/// the pool, which waits off the runtime and reports its own error.
///
/// Each statement is its own read transaction, begun when it runs: it sees
/// every commit made before (a token rotated or recovered is refused from its
/// commit on), as a read on the pool does. Nothing is cached.
pub(crate) struct Readers {
    file: PathBuf,
    /// Connections not in use; `None` once closed.
    idle: Mutex<Option<Vec<rusqlite::Connection>>>,
    /// How many idle ones are kept.
    max_idle: usize,
}

/// The most idle reader connections kept: one is in use per thread running
/// a read at that moment, so one per core (the runtime's threads), and at
/// least 8. More are opened when needed and closed after.
fn idle_readers() -> usize {
    std::thread::available_parallelism().map_or(8, |cores| cores.get().max(8))
}

/// How long a reader waits for a busy database before the read is handed to
/// the pool.
const READER_BUSY: Duration = Duration::from_millis(100);

impl Readers {
    pub(crate) fn new(file: &Path) -> Readers {
        Readers { file: file.to_path_buf(), idle: Mutex::new(Some(Vec::new())), max_idle: idle_readers() }
    }

    /// The first row `query` returns, decoded; `None` if it was not read
    /// here (closed, or the read failed: counted, and the caller reads on
    /// the pool).
    pub(crate) fn fetch_optional<T>(
        &self,
        metrics: &StoreMetrics,
        query: Query<'_>,
        decode: impl FnOnce(&OwnedRow) -> Result<T>,
    ) -> Option<Option<T>> {
        self.fetch_rows(metrics, query, |rows| rows.first().map(decode).transpose())
    }

    /// Every row of `query`, decoded together; as [`Readers::fetch_optional`].
    pub(crate) fn fetch_rows<T>(
        &self,
        metrics: &StoreMetrics,
        query: Query<'_>,
        decode: impl FnOnce(&[OwnedRow]) -> Result<T>,
    ) -> Option<T> {
        let taken = self.idle.lock().unwrap_or_else(PoisonError::into_inner).as_mut()?.pop();
        let read = taken.map_or_else(|| open_reader(&self.file), Ok).and_then(|conn| {
            let found = timed_statement(&conn, metrics, query, true).and_then(|(_, rows)| decode(&rows));
            Ok((conn, found?))
        });
        match read {
            Ok((conn, found)) => {
                if let Some(idle) = self.idle.lock().unwrap_or_else(PoisonError::into_inner).as_mut()
                    && idle.len() < self.max_idle
                {
                    idle.push(conn);
                }
                metrics.direct_reads.inc();
                Some(found)
            }
            Err(error) => {
                metrics.failed_reads.inc();
                tracing::debug!(%error, "a direct SQLite read failed; it runs on the pool");
                None
            }
        }
    }

    /// Closes the idle connections; reads after this are not run here.
    pub(crate) fn close(&self) {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner).take();
    }
}

/// Opens a reader connection on an existing database file: it may not
/// write (`query_only`), and waits at most [`READER_BUSY`] for a lock.
fn open_reader(path: &Path) -> Result<rusqlite::Connection> {
    use rusqlite::OpenFlags;
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = rusqlite::Connection::open_with_flags(path, flags).map_err(direct)?;
    conn.busy_timeout(READER_BUSY).map_err(direct)?;
    conn.pragma_update(None, "query_only", "on").map_err(direct)?;
    // Only in write-ahead-log mode does a reader never wait for the writer.
    let mode: String = conn.pragma_query_value(None, "journal_mode", |row| row.get(0)).map_err(direct)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::Unsupported(format!("direct reads of a database in {mode} mode")));
    }
    conn.set_prepared_statement_cache_capacity(16);
    Ok(conn)
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
    let order = argument_order(&text, &statement)?;
    for (index, n) in order.iter().enumerate() {
        let value = args.get(*n).ok_or_else(|| StoreError::Corrupt(format!("parameter ${} unbound", n + 1)))?;
        statement.raw_bind_parameter(index + 1, to_sql(value)?).map_err(direct)?;
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

/// Statements of the same text whose argument order is known, per thread;
/// forgotten all at once past this many texts (batches of every size).
const ARGUMENT_ORDERS: usize = 512;

thread_local! {
    static ORDERS: std::cell::RefCell<std::collections::HashMap<Box<str>, Arc<[usize]>>> = Default::default();
}

/// For each of `statement`'s parameters, in SQLite's order, the argument it
/// takes (`$n` is argument n - 1). `$n` is a named parameter to SQLite,
/// numbered in order of first use, so its name says which argument it is;
/// SQLite finds a parameter's name by walking the statement's list of
/// names, so a statement of many parameters asked name by name on each run
/// took time in the square of their number (6 % of the server's CPU under
/// load): the order is asked once per text and kept.
fn argument_order(text: &str, statement: &rusqlite::CachedStatement<'_>) -> Result<Arc<[usize]>> {
    if let Some(order) = ORDERS.with(|orders| orders.borrow().get(text).cloned()) {
        return Ok(order);
    }
    let order: Arc<[usize]> = (1..=statement.parameter_count())
        .map(|index| {
            let name = statement.parameter_name(index).unwrap_or_default();
            let n: usize = name.strip_prefix('$').and_then(|n| n.parse().ok()).unwrap_or(0);
            n.checked_sub(1).ok_or_else(|| StoreError::Corrupt(format!("parameter {name:?} is not $n")))
        })
        .collect::<Result<_>>()?;
    ORDERS.with(|orders| {
        let mut orders = orders.borrow_mut();
        if orders.len() >= ARGUMENT_ORDERS {
            orders.clear();
        }
        orders.insert(text.into(), order.clone());
    });
    Ok(order)
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
    fn has_column(&self, name: &str) -> bool {
        self.names.iter().any(|n| n == name)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::sql;

    fn database() -> PathBuf {
        let path = std::env::temp_dir().join(format!("anchor-direct-{}.db", Uuid::new_v4()));
        let conn = open_writer(&path).unwrap();
        conn.execute_batch("create table t (k integer primary key, v text); insert into t values (1, 'one');").unwrap();
        path
    }

    fn remove(path: &Path) {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
    }

    fn read(readers: &Readers, metrics: &StoreMetrics, k: i64) -> Option<Option<String>> {
        readers.fetch_optional(metrics, sql("select v from t where k = $1").bind(k), |row| {
            Ok(row.read_text(Col::Index(0))?.unwrap_or_default())
        })
    }

    #[test]
    fn a_writer_checkpoints_only_past_its_longer_log() {
        let path = database();
        let writer = open_writer(&path).unwrap();
        let file_pages = || std::fs::metadata(&path).unwrap().len() / 4096;
        let commit_pages = |n: usize| {
            for _ in 0..n {
                writer.execute("insert into t (v) values (printf('%.3500c', 'x'))", []).unwrap();
            }
        };
        // 1,000 commits of a row a page each, each writing its new page,
        // the table's root and the file's first page to the log: past
        // SQLite's 1,000 frames, under ours.
        commit_pages(1_000);
        assert!(file_pages() < 100, "no checkpoint yet: the database file holds {} pages", file_pages());
        commit_pages(2_000);
        assert!(file_pages() > 500, "past {WAL_PAGES} frames a commit checkpointed: {} pages", file_pages());
        drop(writer);
        remove(&path);
    }

    #[test]
    fn a_read_sees_each_commit_made_before_it_and_reuses_its_connection() {
        let path = database();
        let (readers, metrics) = (Readers::new(&path), StoreMetrics::default());
        assert_eq!(read(&readers, &metrics, 1), Some(Some("one".into())));
        assert_eq!(read(&readers, &metrics, 2), Some(None), "no row is an answer, not a failure");
        let writer = open_writer(&path).unwrap();
        writer.execute_batch("update t set v = 'uno' where k = 1; insert into t values (2, 'two');").unwrap();
        assert_eq!(read(&readers, &metrics, 1), Some(Some("uno".into())), "the idle connection reads the latest commit");
        assert_eq!(read(&readers, &metrics, 2), Some(Some("two".into())));
        assert_eq!(readers.idle.lock().unwrap().as_ref().map(Vec::len), Some(1), "one connection, kept between reads");
        assert_eq!((metrics.direct_reads.get(), metrics.failed_reads.get()), (4, 0));
        remove(&path);
    }

    #[test]
    fn a_reader_cannot_write() {
        let path = database();
        let (readers, metrics) = (Readers::new(&path), StoreMetrics::default());
        let wrote = readers.fetch_optional(&metrics, sql("delete from t returning k"), |row| row.read_i64(Col::Index(0)));
        assert_eq!(wrote, None, "refused, so left to the pool");
        assert_eq!(metrics.failed_reads.get(), 1);
        assert_eq!(read(&readers, &metrics, 1), Some(Some("one".into())), "the row is still there");
        remove(&path);
    }

    #[test]
    fn a_read_that_fails_or_comes_after_close_is_left_to_the_pool() {
        let missing = std::env::temp_dir().join(format!("anchor-direct-missing-{}.db", Uuid::new_v4()));
        let (readers, metrics) = (Readers::new(&missing), StoreMetrics::default());
        assert_eq!(read(&readers, &metrics, 1), None, "no such file: not created, not read");
        assert!(!missing.exists());
        assert_eq!((metrics.direct_reads.get(), metrics.failed_reads.get()), (0, 1));

        let rollback_journal = std::env::temp_dir().join(format!("anchor-direct-journal-{}.db", Uuid::new_v4()));
        rusqlite::Connection::open(&rollback_journal).unwrap().execute_batch("create table t (k integer primary key, v text)").unwrap();
        let (readers, metrics) = (Readers::new(&rollback_journal), StoreMetrics::default());
        assert_eq!(read(&readers, &metrics, 1), None, "not in WAL mode, a reader could hold up the writer: left to the pool");
        assert_eq!(metrics.failed_reads.get(), 1);
        remove(&rollback_journal);

        let path = database();
        let (readers, metrics) = (Readers::new(&path), StoreMetrics::default());
        assert_eq!(read(&readers, &metrics, 1), Some(Some("one".into())));
        readers.close();
        assert_eq!(read(&readers, &metrics, 1), None, "closed: the pool answers (or refuses)");
        assert_eq!((metrics.direct_reads.get(), metrics.failed_reads.get()), (1, 0), "not a failure");
        remove(&path);
    }
}
