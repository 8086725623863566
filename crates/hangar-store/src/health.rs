//! Whether the open database can still be trusted: a write probe, the
//! SQLite file's identity, and the marker kept beside the file.
//!
//! The decisions are in `hangar_core::database`; this module gathers the
//! facts (stat, the marker's text, the id the database answers with) and
//! remembers, for the life of the process, that the database was lost. A
//! lost database stays lost: the process holds a file nobody else will open
//! again, so nothing it writes from then on counts.

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use hangar_core::database::{
    self as rules, FileCheck, FileId, Lost, Marker, MarkerAction, PathNow,
};
use hangar_core::UnixMillis;

use crate::db::{Backend, Store};
use crate::error::StoreError;

/// What the store knows about the database it opened.
#[derive(Debug)]
pub(crate) struct Guard {
    /// A SQLite file's path and the file it named when it was opened.
    file: Option<(PathBuf, FileId)>,
    /// The id the database answered with when it was opened.
    database_id: String,
    /// Why the database was lost, once it was.
    lost: Mutex<Option<String>>,
}

impl Guard {
    pub(crate) fn new(file: Option<(PathBuf, FileId)>, database_id: String) -> Guard {
        Guard {
            file,
            database_id,
            lost: Mutex::new(None),
        }
    }
}

pub(crate) fn file_id(path: &Path) -> Result<FileId, StoreError> {
    let meta = std::fs::metadata(path).map_err(|e| {
        StoreError::Unhealthy(format!(
            "cannot look at the database file {}: {e}",
            path.display()
        ))
    })?;
    Ok(FileId {
        device: meta.dev(),
        inode: meta.ino(),
    })
}

fn path_now(path: &Path) -> PathNow {
    match std::fs::metadata(path) {
        Ok(meta) => PathNow::Found(FileId {
            device: meta.dev(),
            inode: meta.ino(),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => PathNow::Missing,
        Err(e) => PathNow::Unknown(e.to_string()),
    }
}

fn marker_path(database: &Path) -> PathBuf {
    let mut name = database.as_os_str().to_owned();
    name.push(".id");
    PathBuf::from(name)
}

fn io_error(what: &str, path: &Path, e: std::io::Error) -> StoreError {
    StoreError::Unhealthy(format!("{what} {}: {e}", path.display()))
}

/// Fsyncs a directory, so a file created or renamed in it survives a crash.
fn sync_dir(file: &Path) -> Result<(), StoreError> {
    let dir = match file.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_error("sync the directory", dir, e))
}

/// Reads the marker and decides, before anything is created, whether web
/// may open the database at `path`.
pub(crate) fn check_marker_before_open(
    path: &Path,
    accept_new: bool,
) -> Result<(Marker, bool), StoreError> {
    let marker_file = marker_path(path);
    let marker = match std::fs::read_to_string(&marker_file) {
        Ok(text) => rules::parse_marker(&text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Marker::Absent,
        Err(e) => return Err(io_error("read the database marker", &marker_file, e)),
    };
    let exists = path
        .try_exists()
        .map_err(|e| io_error("look at the database file", path, e))?;
    rules::before_open(&marker, exists, accept_new)
        .map_err(|r| StoreError::Lost(format!("{}: {r}", path.display())))?;
    if accept_new && marker != Marker::Absent && !exists {
        tracing::warn!(database = %path.display(), "starting a new, empty database as --accept-new-database asks");
    }
    Ok((marker, accept_new))
}

/// Creates an empty database file if none is there (an empty file is an
/// empty SQLite database).
pub(crate) fn create_if_missing(path: &Path) -> Result<(), StoreError> {
    match std::fs::File::create_new(path) {
        Ok(file) => {
            file.sync_all()
                .map_err(|e| io_error("sync the new database file", path, e))?;
            sync_dir(path)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(io_error("create the database file", path, e)),
    }
}

/// Once the database answers with `id`: refuses another database than the
/// marker names (unless accepted), and writes the marker when it must change.
pub(crate) fn settle_marker(
    path: &Path,
    marker: &Marker,
    id: &str,
    accept_new: bool,
) -> Result<(), StoreError> {
    match rules::after_open(marker, id, accept_new)
        .map_err(|r| StoreError::Lost(format!("{}: {r}", path.display())))?
    {
        MarkerAction::Keep => Ok(()),
        MarkerAction::Write => write_marker(&marker_path(path), id),
    }
}

/// Replaces the marker whole (a temporary file renamed over it), so a crash
/// leaves the old marker or the new one, never half of one.
fn write_marker(marker: &Path, id: &str) -> Result<(), StoreError> {
    let mut tmp = marker.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(format!("{id}\n").as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, marker)
    };
    write().map_err(|e| io_error("write the database marker", marker, e))?;
    sync_dir(marker)
}

impl Store {
    /// Why the database was lost, if it was.
    pub fn lost(&self) -> Option<String> {
        self.guard
            .lost
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Records that the database is lost and stops all further use of it:
    /// the pool is closed, so every later query fails instead of writing
    /// into a database nobody will read.
    fn mark_lost(&self, lost: Lost) -> StoreError {
        let reason = lost.to_string();
        let mut slot = self.guard.lost.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            match &self.guard.file {
                Some((path, _)) => {
                    tracing::error!(database = %path.display(), %reason, "database lost")
                }
                None => tracing::error!(%reason, "database lost"),
            }
            *slot = Some(reason.clone());
            // `close` marks the pool closed at once; waiting for the
            // connections to drain is not needed here.
            drop(self.pool.close());
        }
        StoreError::Lost(slot.clone().unwrap_or(reason))
    }

    /// A cheap check (one stat) that the database is still the one opened:
    /// for a SQLite file, that its path still names the file opened. Fails
    /// with [`StoreError::Lost`] once the database is lost.
    pub fn check_file(&self) -> Result<(), StoreError> {
        if let Some(reason) = self.lost() {
            return Err(StoreError::Lost(reason));
        }
        let Some((path, opened)) = &self.guard.file else {
            return Ok(());
        };
        match rules::check_file(*opened, &path_now(path)) {
            FileCheck::Same => Ok(()),
            FileCheck::Lost(lost) => Err(self.mark_lost(lost)),
            FileCheck::Unknown(e) => Err(StoreError::Unhealthy(format!(
                "cannot look at the database file: {e}"
            ))),
        }
    }

    /// Whether the database takes a write now: writes this store's row of
    /// `health_probe` in a transaction that also reads the database's id,
    /// within `timeout`. On a SQLite file it also checkpoints the WAL, which
    /// writes the database file itself (a file that took the WAL's commits
    /// but can no longer be written, e.g. made immutable, fails here).
    pub async fn probe(&self, now: UnixMillis, timeout: Duration) -> Result<(), StoreError> {
        self.check_file()?;
        let id = tokio::time::timeout(timeout, self.probe_write(now))
            .await
            .map_err(|_| {
                StoreError::Unhealthy(format!(
                    "the database did not take a write within {}ms",
                    timeout.as_millis()
                ))
            })??;
        if let Err(lost) = rules::check_id(&self.guard.database_id, &id) {
            return Err(self.mark_lost(lost));
        }
        // The file may have gone while the probe wrote into it.
        self.check_file()
    }

    async fn probe_write(&self, now: UnixMillis) -> Result<String, StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "INSERT INTO health_probe (only_row, probed_at) VALUES (1, $1) \
             ON CONFLICT (only_row) DO UPDATE SET probed_at = excluded.probed_at",
        )
        .bind(now)
        .execute(&mut *tx)
        .await?;
        let id: Option<String> =
            sqlx::query_scalar("SELECT id FROM database_identity WHERE only_row = 1")
                .fetch_optional(&mut *tx)
                .await?;
        tx.commit().await?;
        if self.backend() == Backend::Sqlite && self.guard.file.is_some() {
            // PASSIVE never waits for readers; an I/O error is an error.
            sqlx::query("PRAGMA wal_checkpoint(PASSIVE)")
                .fetch_all(&self.pool)
                .await?;
        }
        id.ok_or_else(|| StoreError::Corrupt("the database has no identity row".into()))
    }
}
