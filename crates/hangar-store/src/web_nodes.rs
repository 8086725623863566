//! The web nodes over this database and when each was last alive.

use hangar_core::UnixMillis;
use sqlx::Row;

use crate::db::Store;
use crate::error::StoreError;

/// One web node's row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebNodeRecord {
    pub name: String,
    pub started_at: UnixMillis,
    pub last_heartbeat_at: UnixMillis,
}

impl Store {
    /// Records that web node `name` is alive at `now` (its first heartbeat
    /// also records when it started).
    pub async fn web_node_heartbeat(&self, name: &str, now: UnixMillis) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO web_nodes (name, started_at, last_heartbeat_at) VALUES ($1, $2, $2) \
             ON CONFLICT (name) DO UPDATE SET last_heartbeat_at = $2",
        )
        .bind(name)
        .bind(now)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Removes web node `name` (it stops), and every node whose last
    /// heartbeat is older than `forget_before` (died long ago).
    pub async fn forget_web_nodes(
        &self,
        name: &str,
        forget_before: UnixMillis,
    ) -> Result<u64, StoreError> {
        let done = sqlx::query("DELETE FROM web_nodes WHERE name = $1 OR last_heartbeat_at < $2")
            .bind(name)
            .bind(forget_before)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }

    /// Every web node on record, by name; whether each is alive is
    /// `hangar_core::leases::web_node_alive` of its last heartbeat.
    pub async fn web_nodes(&self) -> Result<Vec<WebNodeRecord>, StoreError> {
        let rows =
            sqlx::query("SELECT name, started_at, last_heartbeat_at FROM web_nodes ORDER BY name")
                .fetch_all(&self.pool)
                .await?;
        rows.iter()
            .map(|r| {
                Ok(WebNodeRecord {
                    name: r.try_get("name")?,
                    started_at: r.try_get("started_at")?,
                    last_heartbeat_at: r.try_get("last_heartbeat_at")?,
                })
            })
            .collect()
    }
}
