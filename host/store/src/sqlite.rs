//! The embedded default: one SQLite file in WAL mode.

use std::path::Path;
use std::time::Duration as StdDuration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous};

pub struct SqliteStore {
    pool: SqlitePool,
}

impl SqliteStore {
    /// Opens (creating if needed) the database file and runs the migrations.
    pub async fn open(path: &Path) -> crate::Result<SqliteStore> {
        if let Some(dir) = path.parent()
            && !dir.as_os_str().is_empty()
        {
            std::fs::create_dir_all(dir).map_err(|e| crate::StoreError::Database(sqlx::Error::Io(e)))?;
        }
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(StdDuration::from_secs(30))
            .foreign_keys(true);
        let pool = SqlitePoolOptions::new().max_connections(8).connect_with(options).await?;
        sqlx::migrate!("../../migrations/sqlite").run(&pool).await?;
        Ok(SqliteStore { pool })
    }
}

crate::imp::store_impl!(SqliteStore, sqlx::Sqlite, "sqlite", "BEGIN IMMEDIATE", "");
crate::dap::dap_impl!(SqliteStore, sqlx::Sqlite, "BEGIN IMMEDIATE");
