//! The store: every piece of state the service keeps, in SQLite (the embedded
//! default, a file under the data directory) or PostgreSQL (production, and
//! shared by several hosts).
//!
//! One trait per area (`AgentStore`, `AraStore`, `DeclarationStore`, `DurStore`, `EarnedStore`, `PaymentStore`,
//! `LogStore`, `OwnerStore`, `TslStore`, …), each implemented once, in ordinary code, for
//! [`SqlStore`] over either engine: the SQL is written once (both engines
//! accept `$n` parameters) and the per-engine differences live in
//! [`engine`]. [`Store`] is all of them together.
//!
//! Every method is one use case and one transaction. Checks and writes that
//! must not race are single conditional statements (`update … where balance
//! >= $1`) or unique constraints, never a read followed by a write, so the same
//! > code is correct on both engines.

mod agents;
mod ara;
pub(crate) mod asa;
mod attempts;
mod batch;
mod bilateral;
mod declarations;
mod deidentify;
mod direct;
mod dur;
pub(crate) mod earned;
pub mod engine;
mod features;
mod feedback;
mod hosts;
mod ise;
mod links;
mod log;
mod lookup;
mod owners;
mod payments;
mod peers;
mod pricing;
mod retention;
mod rows;
mod sdac;
mod tool_components;
pub(crate) mod tsl;
pub mod witness_state;

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use sqlx::{Postgres, Sqlite};

// The ports this crate implements, and what crosses them, named here as
// the application names them.
pub(crate) use anchor_ports::metrics;
pub(crate) use anchor_ports::*;

use engine::{Db, Engine, Exec, Row, sql};

/// The store over one engine.
pub struct SqlStore<E: Engine> {
    db: E,
    /// The group committer of the hot path's writes, started with the
    /// first of them on the runtime that serves it.
    batch: std::sync::OnceLock<batch::Batcher>,
    /// Where the committer sends this host's batches, while another host
    /// holds the commit lease (PostgreSQL; see `peers`).
    forward: batch::ForwardTo,
    /// The hot path's gathered reads, likewise (PostgreSQL only).
    reader: std::sync::OnceLock<lookup::Reader>,
    /// The hot path's reads on connections of their own (SQLite only).
    direct: Option<direct::Readers>,
    /// The background jobs' write transactions (SQLite only).
    writer: Option<direct::Writer>,
    /// Where this host's integrator last left `log_pending` (PostgreSQL):
    /// see `LogStore::integrate_log`.
    pending_from: std::sync::Mutex<Option<chrono::DateTime<chrono::Utc>>>,
    /// Agents this host found by their token lately (`agents::Recent`).
    recent: agents::Recent,
}

/// The embedded default: one SQLite file in WAL mode.
pub type SqliteStore = SqlStore<Db<Sqlite>>;
/// The production store: PostgreSQL, shareable by several stateless hosts.
pub type PostgresStore = SqlStore<Db<Postgres>>;

impl SqliteStore {
    /// Opens (creating if needed) the database file and runs the migrations.
    pub async fn open(path: &Path) -> Result<SqliteStore> {
        Ok(SqlStore::new(engine::open_sqlite(path).await?))
    }
}

impl PostgresStore {
    /// Connects and runs the migrations. `schema`, when given, is created if
    /// missing and used as the search path (tests isolate themselves this way).
    pub async fn connect(url: &str, schema: Option<&str>) -> Result<PostgresStore> {
        Ok(SqlStore::new(engine::connect_postgres(url, schema).await?))
    }
}

impl<E: Engine> SqlStore<E> {
    fn new(db: E) -> SqlStore<E> {
        let direct = db.sqlite_file().map(direct::Readers::new);
        let writer = db.sqlite_file().map(direct::Writer::new);
        SqlStore {
            db,
            batch: std::sync::OnceLock::new(),
            forward: batch::ForwardTo::default(),
            reader: std::sync::OnceLock::new(),
            direct,
            writer,
            pending_from: std::sync::Mutex::new(None),
            recent: agents::Recent::default(),
        }
    }

    /// The group committer, started if it is not yet; `None` in a round of
    /// the background jobs, whose writes have their own connection.
    fn batcher(&self) -> Option<&batch::Batcher> {
        if engine::is_background() {
            return None;
        }
        Some(self.batch.get_or_init(|| batch::Batcher::start(&self.db, self.forward.clone())))
    }

    /// The gathered reads of the hot path, where a statement is a round
    /// trip (PostgreSQL), started if they are not yet; `None` on SQLite and
    /// in a round of the background jobs.
    fn reader(&self) -> Option<&lookup::Reader> {
        if !self.db.round_trips() || engine::is_background() {
            return None;
        }
        Some(self.reader.get_or_init(|| lookup::Reader::start(&self.db, self.forward.clone())))
    }

    /// The first row of `query`, decoded, read on SQLite's direct reader
    /// connections; `None` where there are none (PostgreSQL, a read-only
    /// copy) or the read failed there: the caller then reads on the pool.
    fn read_direct<T>(&self, query: engine::Query<'_>, decode: impl FnOnce(&direct::OwnedRow) -> Result<T>) -> Option<Option<T>> {
        self.direct.as_ref()?.fetch_optional(self.db.metrics(), query, decode)
    }

    /// Runs `steps` as one write transaction on SQLite's background writer
    /// connection ([`direct::Writer`]), committed if they return `Ok`;
    /// `None` where it cannot (PostgreSQL, no multi-threaded runtime): the
    /// caller runs them on the pool.
    fn write_direct<T>(&self, steps: impl FnOnce(&mut direct::DirectTx<'_>) -> Result<T>) -> Option<Result<T>> {
        self.writer.as_ref()?.write(self.db.metrics(), steps)
    }

    /// A background job's one write statement (`query` made anew for each
    /// try): on SQLite's background writer, whose waits for the lock are
    /// short, else on the pool; the rows it changed.
    async fn execute_background<'q>(&self, query: impl Fn() -> engine::Query<'q>) -> Result<u64> {
        if let Some(done) = self.write_direct(|tx| direct::run_now(engine::Exec::execute(tx, query()))) {
            return done;
        }
        self.db().execute(query()).await
    }

    /// Every row of `query`, decoded together, as [`SqlStore::read_direct`] reads.
    fn read_direct_rows<T>(&self, query: engine::Query<'_>, decode: impl FnOnce(&[direct::OwnedRow]) -> Result<T>) -> Option<T> {
        self.direct.as_ref()?.fetch_rows(self.db.metrics(), query, decode)
    }

    /// The pool, for one statement.
    fn db(&self) -> E::Pool<'_> {
        self.db.pool()
    }

    async fn begin_write(&self) -> Result<E::Tx> {
        self.db.begin_write().await
    }
}

/// sqlx's error, classified once into the port's engine-neutral kinds.
pub(crate) fn database_error(error: sqlx::Error) -> StoreError {
    let message = error.to_string();
    match &error {
        sqlx::Error::RowNotFound => StoreError::NotFound(message),
        // A lost or refused connection, a pool that timed out or closed.
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Tls(_) => StoreError::Unavailable(message),
        sqlx::Error::Database(db) => {
            let code = db.code();
            let code = code.as_deref().unwrap_or("");
            let sqlite = db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some();
            let postgres = db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>().is_some();
            // PostgreSQL: connection exceptions (08), the server shutting down or
            // starting (57P01-57P03), a read-only transaction (25006: a standby).
            // SQLite: SQLITE_BUSY (5) and SQLITE_LOCKED (6), with extended codes.
            let unavailable = code.starts_with("08")
                || matches!(code, "57P01" | "57P02" | "57P03" | "25006")
                || (sqlite && (code == "5" || code == "6" || code.parse::<i32>().is_ok_and(|c| c & 0xff == 5 || c & 0xff == 6)));
            // PostgreSQL rolled it back for what other transactions did: a
            // deadlock's victim (40P01), a serialization failure (40001), a
            // lock wait given up (55P03), the statement timeout (57014), no
            // connection slot left (53300).
            let conflict = postgres && matches!(code, "40P01" | "40001" | "55P03" | "57014" | "53300");
            if unavailable {
                StoreError::Unavailable(message)
            } else if conflict {
                StoreError::Conflict(message)
            } else if db.is_unique_violation() {
                StoreError::UniqueKey(message)
            } else {
                StoreError::Database(message)
            }
        }
        _ => StoreError::Database(message),
    }
}

/// An engine's result, its error classified ([`database_error`]).
pub(crate) trait Classified<T> {
    fn classified(self) -> Result<T>;
}

impl<T> Classified<T> for std::result::Result<T, sqlx::Error> {
    fn classified(self) -> Result<T> {
        self.map_err(database_error)
    }
}

impl<T> Classified<T> for std::result::Result<T, sqlx::migrate::MigrateError> {
    fn classified(self) -> Result<T> {
        self.map_err(|error| StoreError::Migration(error.to_string()))
    }
}

fn hash32(column: &str, bytes: Vec<u8>) -> Result<[u8; 32]> {
    bytes.try_into().map_err(|_| StoreError::Corrupt(format!("{column} is not 32 bytes")))
}

#[async_trait]
impl<E: Engine> Store for SqlStore<E> {
    fn backend(&self) -> &'static str {
        self.db.name()
    }

    async fn ping(&self) -> Result<()> {
        self.db().execute(sql("select 1")).await?;
        Ok(())
    }

    fn metrics(&self) -> &metrics::StoreMetrics {
        self.db.metrics()
    }

    fn pool_state(&self) -> metrics::PoolState {
        self.db.pool_state()
    }

    async fn close(&self) {
        if let Some(batcher) = self.batch.get() {
            batcher.stop().await;
        }
        if let Some(direct) = &self.direct {
            direct.close();
        }
        if let Some(writer) = &self.writer {
            writer.close();
        }
        self.db.close().await
    }

    async fn backup_into(&self, dest: &Path) -> Result<()> {
        if self.db.name() != "sqlite" {
            return Err(StoreError::Unsupported("an online copy is taken by PostgreSQL's own tools (pg_dump, pg_basebackup)".into()));
        }
        let dest = dest.to_str().ok_or_else(|| StoreError::Unsupported("the backup path is not UTF-8".into()))?;
        self.db().execute(sql("vacuum into $1").bind(dest)).await?;
        Ok(())
    }

    async fn applied_migrations(&self) -> Result<Vec<(i64, Vec<u8>, bool)>> {
        let rows = self.db().fetch_all(sql("select version, checksum, success from _sqlx_migrations order by version")).await?;
        rows.iter().map(|r| Ok((r.get("version")?, r.get("checksum")?, r.get("success")?))).collect()
    }

    async fn migration_rules(&self) -> Result<Vec<(i64, i64)>> {
        let exists = if self.db.name() == "postgres" {
            "select case when to_regclass('migration_rules') is null then 0::bigint else 1::bigint end as found"
        } else {
            "select count(*) as found from sqlite_master where type = 'table' and name = 'migration_rules'"
        };
        let found: i64 = self.db().fetch_one(sql(exists)).await?.get("found")?;
        if found == 0 {
            return Ok(Vec::new());
        }
        let rows = self.db().fetch_all(sql("select version, runs_beside_builds_from from migration_rules order by version")).await?;
        rows.iter().map(|r| Ok((r.get("version")?, r.get("runs_beside_builds_from")?))).collect()
    }

    fn expected_migrations(&self) -> Vec<(i64, Vec<u8>)> {
        migrations_of(if self.db.name() == "postgres" { engine::postgres_migrator() } else { engine::sqlite_migrator() })
    }

    async fn writable(&self) -> Result<bool> {
        let query = if self.db.name() == "postgres" {
            "select case when (not pg_is_in_recovery()) and current_setting('transaction_read_only') = 'off' then 1::bigint else 0::bigint end as writable"
        } else {
            "select case when query_only = 0 then 1 else 0 end as writable from pragma_query_only"
        };
        let row = self.db().fetch_one(sql(query)).await?;
        Ok(row.get::<i64>("writable")? == 1)
    }
}

/// The migrations this build carries (version, checksum), for the engine a URL names.
pub fn expected_migrations(url: &str) -> Vec<(i64, Vec<u8>)> {
    migrations_of(if is_postgres(url) { engine::postgres_migrator() } else { engine::sqlite_migrator() })
}

/// A migrator's migrations as (version, checksum).
fn migrations_of(migrator: sqlx::migrate::Migrator) -> Vec<(i64, Vec<u8>)> {
    migrator.iter().map(|m| (m.version, m.checksum.to_vec())).collect()
}

fn is_postgres(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

/// Connects to a PostgreSQL streaming replica (a hot standby) of the
/// primary, for reads only: no migration runs, and connections are set
/// read-only. `schema` as for [`PostgresStore::connect`].
pub async fn open_replica(url: &str, schema: Option<&str>) -> Result<Arc<dyn Store>> {
    if !is_postgres(url) {
        return Err(StoreError::Unsupported("a read replica is a PostgreSQL standby: give a postgres:// URL".into()));
    }
    Ok(Arc::new(PostgresStore::new(engine::connect_postgres_replica(url, schema).await?)))
}

/// Opens an existing database as it is, read-only where the engine allows,
/// running no migration: for checking a backup or a restored database.
pub async fn inspect(url: &str) -> Result<Arc<dyn Store>> {
    if is_postgres(url) {
        Ok(Arc::new(PostgresStore::new(engine::connect_postgres_as_is(url).await?)))
    } else {
        let path = url.strip_prefix("sqlite://").unwrap_or(url);
        Ok(Arc::new(SqliteStore::new(engine::open_sqlite_read_only(Path::new(path)).await?)))
    }
}

/// Opens the store a URL names: `postgres://…` (or `postgresql://…`) for
/// PostgreSQL, anything else is a SQLite file path (or `sqlite://…`).
/// Migrations run before this returns.
pub async fn open(url: &str) -> Result<Arc<dyn Store>> {
    if is_postgres(url) {
        Ok(Arc::new(PostgresStore::connect(url, None).await?))
    } else {
        let path = url.strip_prefix("sqlite://").unwrap_or(url);
        Ok(Arc::new(SqliteStore::open(Path::new(path)).await?))
    }
}
