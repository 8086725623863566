//! Reads and writes behind the store's back, through a connection of the
//! test's own: what a copy of the database holds, and rows as another
//! party (an older web, someone with the database) left them.

use sqlx::{AnyPool, Row};

/// A connection to a test database of either kind, by its URL (a SQLite
/// file, not `:memory:`, which is the store's alone).
pub struct RawDb {
    pool: AnyPool,
}

impl RawDb {
    pub async fn connect(url: &str) -> RawDb {
        sqlx::any::install_default_drivers();
        let pool = AnyPool::connect(url)
            .await
            .unwrap_or_else(|e| panic!("connect to {url}: {e}"));
        RawDb { pool }
    }

    /// The `api_token` column of `worker`'s row, as stored.
    pub async fn worker_api_token(&self, worker: &str) -> Option<String> {
        sqlx::query("SELECT api_token FROM workers WHERE name = $1")
            .bind(worker)
            .fetch_one(&self.pool)
            .await
            .unwrap_or_else(|e| panic!("read the api_token of {worker}: {e}"))
            .try_get("api_token")
            .unwrap()
    }

    /// Overwrites the `api_token` column of `worker`'s row.
    pub async fn set_worker_api_token(&self, worker: &str, value: &str) {
        sqlx::query("UPDATE workers SET api_token = $1 WHERE name = $2")
            .bind(value)
            .bind(worker)
            .execute(&self.pool)
            .await
            .unwrap_or_else(|e| panic!("write the api_token of {worker}: {e}"));
    }

    /// How many worker rows there are.
    pub async fn worker_rows(&self) -> i64 {
        sqlx::query("SELECT COUNT(*) AS n FROM workers")
            .fetch_one(&self.pool)
            .await
            .unwrap()
            .try_get("n")
            .unwrap()
    }
}
