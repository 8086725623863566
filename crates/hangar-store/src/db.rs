use std::str::FromStr;
use std::time::Duration;

use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::migrate::Migrator;
use sqlx::{AnyPool, Executor};

use crate::error::StoreError;

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

/// The database behind web. Cheap to clone (the pool is shared).
#[derive(Clone, Debug)]
pub struct Store {
    pub(crate) pool: AnyPool,
    backend: Backend,
}

impl Store {
    /// Connects and applies every pending migration. On SQLite the file is
    /// created if missing.
    pub async fn open(url: &str) -> Result<Store, StoreError> {
        sqlx::any::install_default_drivers();
        let backend = Backend::from_url(url)?;
        let url = match backend {
            // `mode=rwc` creates the file; keep any options the caller gave.
            Backend::Sqlite if !url.contains("mode=") && !url.contains(":memory:") => {
                format!("{url}{}mode=rwc", if url.contains('?') { "&" } else { "?" })
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
                    .after_connect(|conn, _| {
                        Box::pin(async move {
                            conn.execute("PRAGMA journal_mode = WAL").await?;
                            conn.execute("PRAGMA busy_timeout = 5000").await?;
                            conn.execute("PRAGMA synchronous = NORMAL").await?;
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
        let migrator = match backend {
            Backend::Sqlite => &SQLITE_MIGRATIONS,
            Backend::Postgres => &POSTGRES_MIGRATIONS,
        };
        migrator.run(&pool).await?;
        Ok(Store { pool, backend })
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The random id drawn when this database was first migrated. It names
    /// the database, not the web node: every web on one PostgreSQL database
    /// reads the same id, and a deleted and recreated SQLite file gets a new
    /// one.
    pub async fn database_id(&self) -> Result<String, StoreError> {
        let id: String = sqlx::query_scalar("SELECT id FROM database_identity WHERE only_row = 1")
            .fetch_optional(&self.pool)
            .await?
            .ok_or_else(|| StoreError::Corrupt("the database has no identity row".into()))?;
        Ok(id)
    }

    /// Whether the database answers a trivial query.
    pub async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }
}
