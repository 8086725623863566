//! Resource scopes: resources (and resource types) with the same type and
//! source in one team share one check and one version history, as
//! Concourse's "global resources" do.

use hangar_core::pipeline::PipelineConfig;
use hangar_core::UnixMillis;
use sha2::{Digest, Sha256};
use sqlx::{Any, Row, Transaction};

use crate::error::StoreError;

type Source = serde_json::Map<String, serde_json::Value>;

/// What identifies a scope, hashed: the type and the source as canonical
/// JSON (serde_json's maps are sorted). A custom type's name means
/// different things in different pipelines, so a resource of one is also
/// scoped by its pipeline.
pub(crate) fn scope_digest(
    resource_type: &str,
    source: &Source,
    custom_in_pipeline: Option<i64>,
) -> String {
    let identity = serde_json::json!({
        "type": resource_type,
        "source": source,
        "pipeline": custom_in_pipeline,
    });
    let bytes = serde_json::to_vec(&identity).unwrap_or_default();
    format!("{:x}", Sha256::digest(&bytes))
}

/// Points every active resource and resource type of the pipeline at its
/// scope, creating scopes as needed. A scope the migration made for one
/// resource (`resource:<id>`) takes the real digest the first time, so the
/// resource keeps its history.
pub(crate) async fn assign_scopes(
    tx: &mut Transaction<'static, Any>,
    team_id: i64,
    pipeline_id: i64,
    config: &PipelineConfig,
    now: UnixMillis,
) -> Result<(), StoreError> {
    let custom = |t: &str| {
        config
            .resource_types
            .iter()
            .any(|rt| rt.name == t)
            .then_some(pipeline_id)
    };
    for r in &config.resources {
        let digest = scope_digest(&r.resource_type, &r.source, custom(&r.resource_type));
        let scope = scope_for(
            tx,
            team_id,
            "resources",
            pipeline_id,
            &r.name,
            &r.resource_type,
            &r.source,
            &digest,
            now,
        )
        .await?;
        set_scope(tx, "resources", pipeline_id, &r.name, scope).await?;
    }
    for t in &config.resource_types {
        let digest = scope_digest(&t.resource_type, &t.source, custom(&t.resource_type));
        let scope = scope_for(
            tx,
            team_id,
            "resource_types",
            pipeline_id,
            &t.name,
            &t.resource_type,
            &t.source,
            &digest,
            now,
        )
        .await?;
        set_scope(tx, "resource_types", pipeline_id, &t.name, scope).await?;
    }
    delete_orphan_scopes(tx, team_id).await
}

/// Deletes the team's scopes no resource or resource type points at any
/// more (their pipeline was destroyed, or their source changed), with
/// their versions: nothing is left behind for a collector to find.
pub(crate) async fn delete_orphan_scopes(
    tx: &mut Transaction<'static, Any>,
    team_id: i64,
) -> Result<(), StoreError> {
    let orphans = "SELECT s.id FROM resource_scopes s WHERE s.team_id = $1 \
         AND NOT EXISTS (SELECT 1 FROM resources r WHERE r.scope_id = s.id) \
         AND NOT EXISTS (SELECT 1 FROM resource_types t WHERE t.scope_id = s.id)";
    // Versions first, explicitly, as destroy_pipeline deletes children.
    sqlx::query(&format!(
        "DELETE FROM resource_versions WHERE scope_id IN ({orphans})"
    ))
    .bind(team_id)
    .execute(&mut **tx)
    .await?;
    sqlx::query(&format!(
        "DELETE FROM resource_scopes WHERE id IN ({orphans})"
    ))
    .bind(team_id)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

#[allow(clippy::too_many_arguments)]
async fn scope_for(
    tx: &mut Transaction<'static, Any>,
    team_id: i64,
    table: &str,
    pipeline_id: i64,
    name: &str,
    resource_type: &str,
    source: &Source,
    digest: &str,
    now: UnixMillis,
) -> Result<i64, StoreError> {
    let existing = sqlx::query("SELECT id FROM resource_scopes WHERE team_id = $1 AND digest = $2")
        .bind(team_id)
        .bind(digest)
        .fetch_optional(&mut **tx)
        .await?;
    if let Some(row) = existing {
        return Ok(row.try_get("id")?);
    }
    let source_json = serde_json::to_string(source).unwrap_or_else(|_| "null".to_string());
    // A row still on the scope the migration gave it keeps that scope.
    let legacy = sqlx::query(&format!(
        "UPDATE resource_scopes SET digest = $1, type = $2, source = $3 WHERE id = \
         (SELECT r.scope_id FROM {table} r WHERE r.pipeline_id = $4 AND r.name = $5) \
         AND digest LIKE 'resource:%' RETURNING id"
    ))
    .bind(digest)
    .bind(resource_type)
    .bind(&source_json)
    .bind(pipeline_id)
    .bind(name)
    .fetch_optional(&mut **tx)
    .await?;
    if let Some(row) = legacy {
        return Ok(row.try_get("id")?);
    }
    let row = sqlx::query(
        "INSERT INTO resource_scopes (team_id, type, digest, source, created_at) \
         VALUES ($1, $2, $3, $4, $5) RETURNING id",
    )
    .bind(team_id)
    .bind(resource_type)
    .bind(digest)
    .bind(&source_json)
    .bind(now)
    .fetch_one(&mut **tx)
    .await?;
    Ok(row.try_get("id")?)
}

async fn set_scope(
    tx: &mut Transaction<'static, Any>,
    table: &str,
    pipeline_id: i64,
    name: &str,
    scope: i64,
) -> Result<(), StoreError> {
    sqlx::query(&format!(
        "UPDATE {table} SET scope_id = $1 WHERE pipeline_id = $2 AND name = $3"
    ))
    .bind(scope)
    .bind(pipeline_id)
    .bind(name)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::scope_digest;
    use serde_json::json;

    fn digest(t: &str, source: serde_json::Value, custom: Option<i64>) -> String {
        scope_digest(t, source.as_object().unwrap(), custom)
    }

    #[test]
    fn digests_ignore_key_order_and_tell_types_sources_and_custom_pipelines_apart() {
        let a = digest("git", json!({"uri": "u", "branch": "main"}), None);
        let same = digest("git", json!({"branch": "main", "uri": "u"}), None);
        assert_eq!(a, same);
        let cases = [
            digest("git", json!({"uri": "u", "branch": "dev"}), None),
            digest("mock", json!({"uri": "u", "branch": "main"}), None),
            digest("git", json!({"uri": "u", "branch": "main"}), Some(1)),
        ];
        for other in cases {
            assert_ne!(a, other);
        }
        assert_ne!(
            digest("t", json!({}), Some(1)),
            digest("t", json!({}), Some(2))
        );
    }
}
