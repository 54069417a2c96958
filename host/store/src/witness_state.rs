//! The state of a witness (`anchor witness serve`): for each log it follows,
//! the latest checkpoint it cosigned. A database of its own (SQLite, a file in
//! the witness's data directory), apart from the service's.
//!
//! The protocol's one hard rule: checking the submitted old size against the
//! stored one and storing the new checkpoint are one atomic step, or two
//! submissions at once could roll the witness back. Here that step is a single
//! conditional statement (`update … where size = old`), so the losing
//! submission changes nothing and is answered with the size that won.

use std::path::Path;
use std::str::FromStr;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Row, SqlitePool};

use crate::{Classified, StoreError};

/// The latest checkpoint a witness cosigned for one log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Witnessed {
    pub size: u64,
    pub root: [u8; 32],
    /// The checkpoint as cosigned: the log's signature and the witness's.
    pub note: String,
}

/// What a conditional advance did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Advance {
    /// The new checkpoint is stored.
    Stored,
    /// The stored size was not the old size the submission named: this is it.
    Conflict(u64),
}

/// The witness's database.
#[derive(Clone, Debug)]
pub struct WitnessState {
    pool: SqlitePool,
}

fn size_of(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

impl WitnessState {
    /// Opens (or creates) the state file, synchronous on every commit: a
    /// cosignature is only sent once the state it attests is on disk.
    pub async fn open(file: &Path) -> Result<WitnessState, StoreError> {
        if let Some(dir) = file.parent() {
            std::fs::create_dir_all(dir).map_err(|e| StoreError::Unsupported(format!("{}: {e}", dir.display())))?;
        }
        let options = SqliteConnectOptions::from_str(&format!("sqlite://{}", file.display()))
            .classified()?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(std::time::Duration::from_secs(5));
        let pool = SqlitePoolOptions::new().max_connections(4).connect_with(options).await.classified()?;
        // One table; the file belongs to the witness alone.
        sqlx::query(
            "create table if not exists witness_log (
                origin text primary key,
                size integer not null check (size >= 0),
                root blob not null check (length(root) = 32),
                note text not null,
                updated_at text not null
            )",
        )
        .execute(&pool)
        .await
        .classified()?;
        Ok(WitnessState { pool })
    }

    /// The latest checkpoint cosigned for `origin`, if any.
    pub async fn latest(&self, origin: &str) -> Result<Option<Witnessed>, StoreError> {
        let row = sqlx::query("select size, root, note from witness_log where origin = $1")
            .bind(origin)
            .fetch_optional(&self.pool)
            .await
            .classified()?;
        Ok(row.map(|row| {
            let root: Vec<u8> = row.get("root");
            Witnessed { size: size_of(row.get("size")), root: root.try_into().unwrap_or([0; 32]), note: row.get("note") }
        }))
    }

    /// Stores `new` for `origin` if the stored size is still `old_size` (no
    /// row counts as size 0), in one statement.
    pub async fn advance(&self, origin: &str, old_size: u64, new: &Witnessed, at: &str) -> Result<Advance, StoreError> {
        let old = i64::try_from(old_size).map_err(|_| StoreError::Unsupported("size out of range".into()))?;
        let size = i64::try_from(new.size).map_err(|_| StoreError::Unsupported("size out of range".into()))?;
        // One statement: a first checkpoint is inserted only from size 0; an
        // existing row is replaced only while it still holds the old size.
        let stored = sqlx::query(
            "insert into witness_log (origin, size, root, note, updated_at) select $1, $2, $3, $4, $5
             where $6 = 0 or exists (select 1 from witness_log where origin = $1)
             on conflict (origin) do update set size = excluded.size, root = excluded.root, note = excluded.note,
                 updated_at = excluded.updated_at
             where witness_log.size = $6",
        )
        .bind(origin)
        .bind(size)
        .bind(new.root.as_slice())
        .bind(&new.note)
        .bind(at)
        .bind(old)
        .execute(&self.pool)
        .await
        .classified()?
        .rows_affected();
        if stored == 1 {
            return Ok(Advance::Stored);
        }
        Ok(Advance::Conflict(self.latest(origin).await?.map_or(0, |w| w.size)))
    }
}
