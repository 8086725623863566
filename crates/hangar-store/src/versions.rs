//! Resource versions: each belongs to a scope (the history resources of
//! one type and source share); disabling one is per resource.

use hangar_core::UnixMillis;
use serde_json::Value;
use sqlx::Row;

use crate::db::Store;
use crate::error::StoreError;
use crate::pipelines::{
    json, version_from_row, ResourceVersionRecord, VersionPage, VERSION_COLUMNS,
};

impl Store {
    /// Records a version a check, get or put of resource `resource_id`
    /// found, in the resource's scope (once per scope and version; a
    /// version seen again keeps its row and is returned). `metadata` other
    /// than `[]` (what a get's `in` answered) replaces the row's, as
    /// Concourse's get step updates its version's metadata; `[]` (a check
    /// knows none) never erases it.
    pub async fn save_resource_version(
        &self,
        resource_id: i64,
        version: &Value,
        metadata: &Value,
        now: UnixMillis,
    ) -> Result<ResourceVersionRecord, StoreError> {
        let mut tx = self.pool.begin().await?;
        let scope: Option<i64> = sqlx::query("SELECT scope_id FROM resources WHERE id = $1")
            .bind(resource_id)
            .fetch_optional(&mut *tx)
            .await?
            .map(|r| r.try_get("scope_id"))
            .transpose()?
            .flatten();
        let Some(scope) = scope else {
            return Err(StoreError::NotFound(format!(
                "resource {resource_id} not found (or has no scope)"
            )));
        };
        let order: i64 = sqlx::query(
            "SELECT COALESCE(MAX(check_order), 0) + 1 AS next FROM resource_versions \
             WHERE scope_id = $1",
        )
        .bind(scope)
        .fetch_one(&mut *tx)
        .await?
        .try_get("next")?;
        sqlx::query(
            "INSERT INTO resource_versions (scope_id, version, metadata, check_order, created_at) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (scope_id, version) DO UPDATE \
             SET metadata = excluded.metadata \
             WHERE excluded.metadata <> '[]' AND resource_versions.metadata <> excluded.metadata",
        )
        .bind(scope)
        .bind(json(version))
        .bind(json(metadata))
        .bind(order)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        let row = sqlx::query(&format!(
            "SELECT {VERSION_COLUMNS} FROM resource_versions v WHERE v.scope_id = $2 AND v.version = $3"
        ))
        .bind(resource_id)
        .bind(scope)
        .bind(json(version))
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        version_from_row(&row)
    }

    /// A page of a resource's versions, newest (largest id) first.
    pub async fn resource_versions(
        &self,
        team: &str,
        pipeline: &str,
        resource: &str,
        page: VersionPage,
    ) -> Result<Vec<ResourceVersionRecord>, StoreError> {
        let r = self.resource(team, pipeline, resource).await?;
        let Some(scope) = r.scope_id else {
            return Ok(Vec::new());
        };
        // With `after`, the page nearest to it is taken (ascending) and
        // turned around, so paging forward does not skip versions.
        let rows = if let Some(after) = page.after {
            let mut rows = sqlx::query(&format!(
                "SELECT {VERSION_COLUMNS} FROM resource_versions v WHERE v.scope_id = $2 \
                 AND v.id > $3 AND ($4 < 0 OR v.id < $4) ORDER BY v.id LIMIT $5"
            ))
            .bind(r.id)
            .bind(scope)
            .bind(after)
            .bind(page.before.unwrap_or(-1))
            .bind(page.limit)
            .fetch_all(&self.pool)
            .await?;
            rows.reverse();
            rows
        } else {
            sqlx::query(&format!(
                "SELECT {VERSION_COLUMNS} FROM resource_versions v WHERE v.scope_id = $2 \
                 AND ($3 < 0 OR v.id < $3) ORDER BY v.id DESC LIMIT $4"
            ))
            .bind(r.id)
            .bind(scope)
            .bind(page.before.unwrap_or(-1))
            .bind(page.limit)
            .fetch_all(&self.pool)
            .await?
        };
        rows.iter().map(version_from_row).collect()
    }
}
