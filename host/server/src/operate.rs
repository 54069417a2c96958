//! Operator commands on the database: `anchor backup` (an online copy of the
//! embedded SQLite database, optionally checked), `anchor backup --check`
//! (check a copy or a restored database, SQLite or PostgreSQL) and
//! `anchor restore` (put a checked copy in place of a stopped server's data).
//!
//! A serving host holds a shared lock on `<database>.lock`; restore takes it
//! exclusively, so it refuses while any server has the file open.

use std::fs::{File, TryLockError};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

/// Where the embedded database lives, and its lock file.
pub struct Embedded {
    pub database: PathBuf,
}

impl Embedded {
    pub fn new(database: PathBuf) -> Embedded {
        Embedded { database }
    }

    fn lock_path(&self) -> PathBuf {
        let mut name = self.database.as_os_str().to_owned();
        name.push(".lock");
        PathBuf::from(name)
    }

    fn open_lock(&self) -> anyhow::Result<File> {
        if let Some(dir) = self.database.parent()
            && !dir.as_os_str().is_empty()
        {
            std::fs::create_dir_all(dir)?;
        }
        let path = self.lock_path();
        // Run restore as the service's user: a lock file root creates, the service cannot open.
        File::options().create(true).truncate(false).append(true).open(&path).with_context(|| format!("opening {}", path.display()))
    }

    /// The lock a serving host holds for as long as it runs (several hosts
    /// may share one file; a restore may not run beside any of them).
    pub fn serving_lock(&self) -> anyhow::Result<File> {
        let file = self.open_lock()?;
        match file.try_lock_shared() {
            Ok(()) => Ok(file),
            Err(TryLockError::WouldBlock) => {
                bail!("{} is being restored; start the server once the restore is done", self.database.display())
            }
            Err(TryLockError::Error(error)) => Err(error).context("locking the database file"),
        }
    }
}

/// The checks of `anchor_app::backup` on the database at `url` (a SQLite file or a PostgreSQL URL).
pub async fn check(url: &str, vkey: Option<&str>) -> anyhow::Result<anchor_app::backup::Checked> {
    if !url.contains("://") && !Path::new(url).is_file() {
        bail!("{url} is not a file");
    }
    let store = anchor_store::inspect(url).await.with_context(|| format!("opening {}", brief_url(url)))?;
    let checked = anchor_app::backup::check(store.as_ref(), &anchor_store::expected_migrations(url), vkey).await;
    store.close().await;
    checked
}

/// A URL without its password, for messages.
fn brief_url(url: &str) -> String {
    match (url.split_once("://"), url.rsplit_once('@')) {
        (Some((scheme, _)), Some((_, host))) => format!("{scheme}://…@{host}"),
        _ => url.to_string(),
    }
}

/// Prints what a check established.
pub fn report(what: &str, checked: &anchor_app::backup::Checked) {
    let what = brief_url(what);
    println!("ok: {what} opens; its {} migrations are this build's", checked.migrations);
    println!(
        "ok: its log of {} leaves matches its {} checkpoints{}",
        checked.leaves,
        checked.checkpoints,
        if checked.signatures { ", each signed by the log's key" } else { " (signatures not checked: no log key given or found)" }
    );
}

/// `anchor backup DEST`: a consistent copy of the serving database.
pub async fn backup(source: &Embedded, dest: &Path) -> anyhow::Result<()> {
    if dest.exists() {
        bail!("{} exists; a backup never overwrites a file", dest.display());
    }
    if !source.database.is_file() {
        bail!("there is no database at {}", source.database.display());
    }
    let url = source.database.to_string_lossy().into_owned();
    let store = anchor_store::inspect(&url).await.with_context(|| format!("opening {}", source.database.display()))?;
    let started = std::time::Instant::now();
    let copied = store.backup_into(dest).await;
    store.close().await;
    copied.with_context(|| format!("copying into {}", dest.display()))?;
    let bytes = std::fs::metadata(dest).map(|m| m.len()).unwrap_or(0);
    println!("ok: {} copied to {} ({bytes} bytes in {:.1?})", source.database.display(), dest.display(), started.elapsed());
    Ok(())
}

/// `anchor restore SRC`: makes a fresh copy of SRC beside the database
/// (with `VACUUM INTO`, so what a write-ahead log beside SRC holds comes
/// along), checks that copy, and only then moves the database there aside
/// (kept, never deleted) and puts the copy in its place. Refused while a
/// server runs on the database, and when the database there has published
/// checkpoints past the copy's log: the restored host would sign other trees
/// at sizes verifiers already hold, unless `accept_log_fork` says the
/// operator knows.
pub async fn restore(target: &Embedded, source: &Path, vkey: Option<&str>, accept_log_fork: bool) -> anyhow::Result<()> {
    if !source.is_file() {
        bail!("{} is not a file", source.display());
    }
    let lock = target.open_lock()?;
    match lock.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            bail!("a server is running on {}; stop it before restoring (nothing was changed)", target.database.display())
        }
        Err(TryLockError::Error(error)) => return Err(error).context("locking the database file"),
    }
    let database = &target.database;
    let partial = PathBuf::from(format!("{}.restoring", database.display()));
    let _ = std::fs::remove_file(&partial);
    let copied = async {
        let store = anchor_store::inspect(&source.to_string_lossy()).await.with_context(|| format!("opening {}", source.display()))?;
        let copied = store.backup_into(&partial).await;
        store.close().await;
        copied.with_context(|| format!("copying {}", source.display()))?;
        File::open(&partial)?.sync_all()?;
        check(&partial.to_string_lossy(), vkey).await.with_context(|| format!("{} is not a usable copy", source.display()))
    };
    let checked = match copied.await {
        Ok(checked) => checked,
        Err(error) => {
            let _ = std::fs::remove_file(&partial);
            return Err(error);
        }
    };
    report(&source.display().to_string(), &checked);
    if database.exists() {
        let published = published_size(database).await;
        if let Some(size) = published
            && size > checked.leaves
            && !accept_log_fork
        {
            let _ = std::fs::remove_file(&partial);
            bail!(
                "the database there has published a checkpoint of {size} leaves and the copy's log has {}: \
                 a restored host would sign other trees at sizes verifiers may already hold. \
                 Restore anyway with --accept-log-fork (and tell the log's verifiers), or restore a newer copy (nothing was changed)",
                checked.leaves
            );
        }
        let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%SZ");
        for suffix in ["", "-wal", "-shm"] {
            let from = PathBuf::from(format!("{}{suffix}", database.display()));
            if from.exists() {
                let aside = PathBuf::from(format!("{}.before-restore-{stamp}{suffix}", database.display()));
                std::fs::rename(&from, &aside).with_context(|| format!("moving {} aside", from.display()))?;
                if suffix.is_empty() {
                    println!("ok: the database that was there is kept as {}", aside.display());
                }
            }
        }
    }
    std::fs::rename(&partial, database)?;
    if let Some(dir) = database.parent().filter(|d| !d.as_os_str().is_empty()) {
        File::open(dir)?.sync_all()?;
    }
    drop(lock);
    println!("ok: {} restored to {}", source.display(), database.display());
    Ok(())
}

/// The size of the latest checkpoint the database at `path` published, if it can be read.
async fn published_size(path: &Path) -> Option<i64> {
    let store = anchor_store::inspect(&path.to_string_lossy()).await.ok()?;
    let latest = store.latest_checkpoint().await.ok().flatten().map(|c| c.size);
    store.close().await;
    latest
}
