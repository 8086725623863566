use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::migrate::Migrator;
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{AnyPool, Executor};

use crate::error::StoreError;
use crate::health::{self, Guard};

static SQLITE_MIGRATIONS: Migrator = sqlx::migrate!("./migrations/sqlite");
static POSTGRES_MIGRATIONS: Migrator = sqlx::migrate!("./migrations/postgres");

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    pub fn from_url(url: &str) -> Result<Backend, StoreError> {
        if url.starts_with("sqlite:") {
            Ok(Backend::Sqlite)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(Backend::Postgres)
        } else {
            Err(StoreError::Database(sqlx::Error::Configuration(
                format!(
                    "unsupported database url {:?}: use sqlite://PATH or postgres://…",
                    url.split(':').next().unwrap_or("")
                )
                .into(),
            )))
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }
}

/// The database behind web. Cheap to clone (the pool and the guard are
/// shared). Its `Debug` shows the URL without its password.
#[derive(Clone)]
pub struct Store {
    pub(crate) pool: AnyPool,
    backend: Backend,
    /// Where the pool connects: a listener for other nodes' wake-ups
    /// needs a connection of its own.
    pub(crate) url: Arc<str>,
    pub(crate) guard: Arc<Guard>,
    /// Where this node's sweep of the caches stands.
    pub(crate) cache_sweep: Arc<crate::gc::CacheSweep>,
    /// What worker API tokens are sealed with at rest (web's; none for
    /// tools and tests that store no token).
    pub(crate) worker_token_key: Option<Arc<crate::api_tokens::WorkerTokenKey>>,
    /// How young a volume row a report does not judge missing yet (web
    /// sets `hangar_core::volumes::YOUNG_VOLUME_MS`; 0 judges every row).
    pub(crate) young_volume_ms: i64,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("backend", &self.backend)
            .field("url", &without_password(&self.url))
            .finish_non_exhaustive()
    }
}

/// `url` with its password (in the user info, or a `password` query
/// parameter) replaced by `***`, for logs and `Debug`.
pub(crate) fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    let authority = match authority.rsplit_once('@') {
        Some((user_info, host)) => match user_info.split_once(':') {
            Some((user, _password)) => format!("{user}:***@{host}"),
            None => authority.to_string(),
        },
        None => authority.to_string(),
    };
    let path = match path.split_once('?') {
        Some((before, query)) => {
            let params: Vec<String> = query
                .split('&')
                .map(|p| match p.split_once('=') {
                    Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                    _ => p.to_string(),
                })
                .collect();
            format!("{before}?{}", params.join("&"))
        }
        None => path.to_string(),
    };
    format!("{scheme}://{authority}{path}")
}

#[cfg(test)]
mod redaction_tests {
    use super::without_password;

    #[test]
    fn a_url_shows_without_its_password() {
        let cases = [
            (
                "postgres://hangar:s3cr%40t@db.example:5432/hangar?sslmode=require",
                "postgres://hangar:***@db.example:5432/hangar?sslmode=require",
            ),
            ("postgres://hangar:p@ss@db/x", "postgres://hangar:***@db/x"),
            ("postgres://hangar@db/x", "postgres://hangar@db/x"),
            (
                "postgres://db/x?sslmode=disable&password=q",
                "postgres://db/x?sslmode=disable&password=***",
            ),
            (
                "sqlite:///var/lib/hangar/web.db",
                "sqlite:///var/lib/hangar/web.db",
            ),
            ("sqlite::memory:", "sqlite::memory:"),
            ("", ""),
        ];
        for (url, shown) in cases {
            assert_eq!(without_password(url), shown, "{url}");
        }
    }
}

/// Applies SQLite's pending migrations with foreign keys off, then checks
/// every key. A migration that must rebuild a table (SQLite cannot drop a
/// constraint: 0024 rebuilds `pipelines`) would otherwise cascade the old
/// table's drop to every row that refers to it. The pragma does nothing
/// inside a transaction, and each migration runs in one, so it is set on the
/// connection around them (the pool's only one). A key left dangling fails
/// the open.
async fn migrate_sqlite(pool: &AnyPool) -> Result<(), StoreError> {
    let mut conn = pool.acquire().await?;
    conn.execute("PRAGMA foreign_keys = OFF").await?;
    let ran = SQLITE_MIGRATIONS.run(&mut *conn).await;
    let dangling = sqlx::query("PRAGMA foreign_key_check")
        .fetch_all(&mut *conn)
        .await;
    conn.execute("PRAGMA foreign_keys = ON").await?;
    ran?;
    let dangling = dangling?.len();
    if dangling > 0 {
        return Err(StoreError::Corrupt(format!(
            "{dangling} rows refer to rows that do not exist after migrating"
        )));
    }
    Ok(())
}

impl Store {
    /// Connects and applies every pending migration. On SQLite the file is
    /// created if missing. No marker is kept: for tests and tools; web opens
    /// with [`Store::open_checked`].
    pub async fn open(url: &str) -> Result<Store, StoreError> {
        Store::open_with(url, None).await
    }

    /// As [`Store::open`], and for a SQLite file also checks the marker web
    /// keeps beside it (`<file>.id`, the database's id): a marker naming a
    /// database that is missing or another one refuses to start, unless
    /// `accept_new_database`; then (re)writes the marker.
    pub async fn open_checked(url: &str, accept_new_database: bool) -> Result<Store, StoreError> {
        Store::open_with(url, Some(accept_new_database)).await
    }

    async fn open_with(url: &str, marker: Option<bool>) -> Result<Store, StoreError> {
        sqlx::any::install_default_drivers();
        let backend = Backend::from_url(url)?;
        let (url, synchronous) = match backend {
            Backend::Sqlite => take_synchronous(url)?,
            Backend::Postgres => (url.to_string(), Synchronous::Full),
        };
        let url = url.as_str();
        let file = match backend {
            Backend::Sqlite => sqlite_file(url)?,
            Backend::Postgres => None,
        };
        let marker = match (&file, marker) {
            (Some(path), Some(accept)) => Some(health::check_marker_before_open(path, accept)?),
            _ => None,
        };
        let url = match (&file, backend) {
            // Create a missing file here, once (an empty file is an empty
            // SQLite database), and connect with `mode=rw`: a connection the
            // pool reopens later must fail on a deleted file, not create an
            // empty one in its place. Keep any options the caller gave.
            (Some(path), Backend::Sqlite) if !url.contains("mode=") => {
                health::create_if_missing(path)?;
                format!("{url}{}mode=rw", if url.contains('?') { "&" } else { "?" })
            }
            _ => url.to_string(),
        };
        let options = AnyConnectOptions::from_str(&url)?;
        let pool = match backend {
            // SQLite serialises writers anyway; one connection avoids
            // SQLITE_BUSY on lock upgrades and keeps `:memory:` one database.
            Backend::Sqlite => {
                AnyPoolOptions::new()
                    .max_connections(1)
                    .acquire_timeout(Duration::from_secs(30))
                    .after_connect(move |conn, _| {
                        Box::pin(async move {
                            conn.execute("PRAGMA journal_mode = WAL").await?;
                            conn.execute("PRAGMA busy_timeout = 5000").await?;
                            // FULL (the default): every commit is fsynced to
                            // the WAL before it returns, so a write web
                            // acknowledged survives a power loss too. NORMAL
                            // survives a crash of web, not of the machine.
                            conn.execute(synchronous.pragma()).await?;
                            // Off by default in SQLite; PostgreSQL always checks.
                            conn.execute("PRAGMA foreign_keys = ON").await?;
                            Ok(())
                        })
                    })
                    .connect_with(options)
                    .await?
            }
            Backend::Postgres => {
                AnyPoolOptions::new()
                    .max_connections(16)
                    .acquire_timeout(Duration::from_secs(10))
                    .connect_with(options)
                    .await?
            }
        };
        // The pool holds a connection now: this is the file it opened.
        let file = match file {
            Some(path) => {
                let id = health::file_id(&path)?;
                Some((path, id))
            }
            None => None,
        };
        match backend {
            Backend::Sqlite => migrate_sqlite(&pool).await?,
            Backend::Postgres => POSTGRES_MIGRATIONS.run(&pool).await?,
        }
        let database_id = read_database_id(&pool).await?;
        if let (Some((path, _)), Some((marker, accept))) = (&file, marker) {
            health::settle_marker(path, &marker, &database_id, accept)?;
        }
        Ok(Store {
            url: Arc::from(url),
            pool,
            backend,
            guard: Arc::new(Guard::new(file, database_id)),
            cache_sweep: Arc::default(),
            worker_token_key: None,
            young_volume_ms: 0,
        })
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The random id drawn when this database was first migrated. It names
    /// the database, not the web node: every web on one PostgreSQL database
    /// reads the same id, and a deleted and recreated SQLite file gets a new
    /// one.
    pub async fn database_id(&self) -> Result<String, StoreError> {
        read_database_id(&self.pool).await
    }

    /// SQLite's `PRAGMA synchronous` on the store's connection (2 = FULL,
    /// 1 = NORMAL); `None` on PostgreSQL.
    pub async fn sqlite_synchronous(&self) -> Result<Option<i64>, StoreError> {
        match self.backend {
            Backend::Sqlite => Ok(Some(
                sqlx::query_scalar("PRAGMA synchronous")
                    .fetch_one(&self.pool)
                    .await?,
            )),
            Backend::Postgres => Ok(None),
        }
    }

    /// Whether the database answers a trivial query. Says nothing about
    /// writes (a read-only or deleted SQLite file answers it): health is
    /// [`Store::probe`].
    pub async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }
}

async fn read_database_id(pool: &AnyPool) -> Result<String, StoreError> {
    sqlx::query_scalar("SELECT id FROM database_identity WHERE only_row = 1")
        .fetch_optional(pool)
        .await?
        .ok_or_else(|| StoreError::Corrupt("the database has no identity row".into()))
}

/// How SQLite syncs commits: `?synchronous=full` (the default) or
/// `?synchronous=normal` in the URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Synchronous {
    Full,
    Normal,
}

impl Synchronous {
    fn pragma(self) -> &'static str {
        match self {
            Synchronous::Full => "PRAGMA synchronous = FULL",
            Synchronous::Normal => "PRAGMA synchronous = NORMAL",
        }
    }
}

/// Takes hangar's own `synchronous` parameter out of a SQLite URL (sqlx
/// refuses parameters it does not know).
fn take_synchronous(url: &str) -> Result<(String, Synchronous), StoreError> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_string(), Synchronous::Full));
    };
    let mut synchronous = Synchronous::Full;
    let mut kept = Vec::new();
    for param in query.split('&') {
        match param.split_once('=') {
            Some(("synchronous", value)) => {
                synchronous = match value.to_ascii_lowercase().as_str() {
                    "full" => Synchronous::Full,
                    "normal" => Synchronous::Normal,
                    other => {
                        return Err(StoreError::Database(sqlx::Error::Configuration(
                            format!("synchronous={other:?}: use full or normal").into(),
                        )))
                    }
                }
            }
            _ => kept.push(param),
        }
    }
    let url = if kept.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((url, synchronous))
}

/// The file behind a SQLite URL; `None` for an in-memory database.
fn sqlite_file(url: &str) -> Result<Option<PathBuf>, StoreError> {
    if url.contains(":memory:") || url.contains("mode=memory") {
        return Ok(None);
    }
    let options = SqliteConnectOptions::from_str(url)?;
    Ok(Some(options.get_filename().to_path_buf()))
}
