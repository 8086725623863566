//! A pipeline's history at once, for the scheduling benchmark and tests at
//! scale: versions and succeeded job builds (with the versions they used)
//! inserted many rows per statement instead of one transaction each.

use hangar_core::UnixMillis;
use serde_json::Value;
use sqlx::Row;

use crate::db::Store;
use crate::error::StoreError;
use crate::pipelines::json;

/// Rows per statement: a few binds each stays under both databases' limits.
const ROWS_PER_STATEMENT: usize = 200;

/// One succeeded build of a job for [`Store::insert_succeeded_job_builds`]:
/// its inputs (name, resource, version) and its puts' versions (resource,
/// version). As on success, the inputs are recorded as outputs too.
#[derive(Debug, Clone, Default)]
pub struct HistoricBuild {
    pub inputs: Vec<(String, i64, i64)>,
    pub outputs: Vec<(i64, i64)>,
}

impl Store {
    /// Appends `versions` to resource `resource_id`'s scope in this order
    /// (check order after its newest); versions the scope has are skipped.
    /// Returns the new versions' ids, in order.
    pub async fn insert_versions(
        &self,
        resource_id: i64,
        versions: &[Value],
        now: UnixMillis,
    ) -> Result<Vec<i64>, StoreError> {
        let mut tx = self.pool.begin().await?;
        let row = sqlx::query(
            "SELECT r.scope_id, COALESCE((SELECT MAX(check_order) FROM resource_versions v \
             WHERE v.scope_id = r.scope_id), 0) AS top FROM resources r WHERE r.id = $1",
        )
        .bind(resource_id)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("resource {resource_id} not found")))?;
        let scope: Option<i64> = row.try_get("scope_id")?;
        let scope = scope
            .ok_or_else(|| StoreError::NotFound(format!("resource {resource_id} has no scope")))?;
        let mut order: i64 = row.try_get("top")?;
        let mut ids = Vec::with_capacity(versions.len());
        for chunk in versions.chunks(ROWS_PER_STATEMENT) {
            let values: Vec<String> = (0..chunk.len())
                .map(|i| format!("($1, ${}, '[]', ${}, $2)", i * 2 + 3, i * 2 + 4))
                .collect();
            let sql = format!(
                "INSERT INTO resource_versions (scope_id, version, metadata, check_order, created_at) \
                 VALUES {} ON CONFLICT (scope_id, version) DO NOTHING RETURNING id, check_order",
                values.join(", ")
            );
            let mut q = sqlx::query(&sql).bind(scope).bind(now);
            for v in chunk {
                order += 1;
                q = q.bind(json(v)).bind(order);
            }
            let mut rows: Vec<(i64, i64)> = q
                .fetch_all(&mut *tx)
                .await?
                .iter()
                .map(|r| Ok((r.try_get("check_order")?, r.try_get("id")?)))
                .collect::<Result<_, StoreError>>()?;
            rows.sort_unstable();
            ids.extend(rows.into_iter().map(|(_, id)| id));
        }
        tx.commit().await?;
        Ok(ids)
    }

    /// Appends succeeded builds to job `job_id`, numbered after its last
    /// one, with their inputs and outputs recorded. Returns the builds' ids
    /// in order.
    pub async fn insert_succeeded_job_builds(
        &self,
        job_id: i64,
        job_name: &str,
        builds: &[HistoricBuild],
        now: UnixMillis,
    ) -> Result<Vec<i64>, StoreError> {
        let mut tx = self.pool.begin().await?;
        let first: i64 = sqlx::query(
            "UPDATE jobs SET next_build_number = next_build_number + $1 WHERE id = $2 \
             RETURNING next_build_number",
        )
        .bind(builds.len() as i64)
        .bind(job_id)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("job {job_id} not found")))?
        .try_get::<i64, _>("next_build_number")?
            - builds.len() as i64;
        let mut ids = Vec::with_capacity(builds.len());
        for (c, chunk) in builds.chunks(ROWS_PER_STATEMENT).enumerate() {
            let base = first + (c * ROWS_PER_STATEMENT) as i64;
            let values: Vec<String> = (0..chunk.len())
                .map(|i| {
                    format!(
                        "(${}, NULL, '[]', '{{}}', 'succeeded', $1, $1, $1, 0)",
                        i + 2
                    )
                })
                .collect();
            let sql = format!(
                "INSERT INTO builds (name, team, plan, artifacts, status, created_at, started_at, \
                 finished_at, exit_code) VALUES {} RETURNING id, name",
                values.join(", ")
            );
            let mut q = sqlx::query(&sql).bind(now);
            for i in 0..chunk.len() {
                q = q.bind(format!("{job_name} #{}", base + i as i64));
            }
            let mut made: Vec<(i64, i64)> = Vec::with_capacity(chunk.len());
            for r in q.fetch_all(&mut *tx).await? {
                let name: String = r.try_get("name")?;
                let number: i64 = name
                    .rsplit_once(" #")
                    .and_then(|(_, n)| n.parse().ok())
                    .unwrap_or_default();
                made.push((number, r.try_get("id")?));
            }
            made.sort_unstable();
            for (k, (number, id)) in made.iter().enumerate() {
                sqlx::query(
                    "INSERT INTO job_builds (job_id, build_number, build_id) VALUES ($1, $2, $3)",
                )
                .bind(job_id)
                .bind(number)
                .bind(id)
                .execute(&mut *tx)
                .await?;
                let build = &chunk[k];
                for (name, resource, version) in &build.inputs {
                    sqlx::query(
                        "INSERT INTO build_inputs (build_id, job_id, name, resource_id, version_id) \
                         VALUES ($1, $2, $3, $4, $5)",
                    )
                    .bind(id)
                    .bind(job_id)
                    .bind(name)
                    .bind(resource)
                    .bind(version)
                    .execute(&mut *tx)
                    .await?;
                }
                let outputs = build
                    .inputs
                    .iter()
                    .map(|(_, r, v)| (*r, *v))
                    .chain(build.outputs.iter().copied());
                for (resource, version) in outputs {
                    sqlx::query(
                        "INSERT INTO build_outputs (build_id, job_id, resource_id, version_id) \
                         VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
                    )
                    .bind(id)
                    .bind(job_id)
                    .bind(resource)
                    .bind(version)
                    .execute(&mut *tx)
                    .await?;
                }
                ids.push(*id);
            }
        }
        tx.commit().await?;
        Ok(ids)
    }
}
