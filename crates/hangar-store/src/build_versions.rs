//! The versions a job build used (its `get`s) and produced (its `put`s),
//! recorded so the scheduler can ask which versions went through a job.

use sqlx::Row;

use crate::db::Store;
use crate::error::StoreError;

/// One version a build used or produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildVersionRecord {
    /// The input's name (the `get` step's name); `None` for an output.
    pub name: Option<String>,
    pub resource_id: i64,
    pub version_id: i64,
}

impl Store {
    /// Records that build `build_id` of job `job_id` used `version_id` of
    /// `resource_id` as its input `name`. Recording the same input again
    /// (a step resumed on another node) keeps the first row.
    pub async fn record_build_input(
        &self,
        build_id: i64,
        job_id: i64,
        name: &str,
        resource_id: i64,
        version_id: i64,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO build_inputs (build_id, job_id, name, resource_id, version_id) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (build_id, name) DO NOTHING",
        )
        .bind(build_id)
        .bind(job_id)
        .bind(name)
        .bind(resource_id)
        .bind(version_id)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Records that build `build_id` of job `job_id` produced `version_id`
    /// of `resource_id` (a `put`). Idempotent.
    pub async fn record_build_output(
        &self,
        build_id: i64,
        job_id: i64,
        resource_id: i64,
        version_id: i64,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO build_outputs (build_id, job_id, resource_id, version_id) \
             VALUES ($1, $2, $3, $4) ON CONFLICT (build_id, resource_id, version_id) DO NOTHING",
        )
        .bind(build_id)
        .bind(job_id)
        .bind(resource_id)
        .bind(version_id)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Copies a succeeded build's inputs into its outputs, as Concourse
    /// does, so that `passed` reads outputs alone. Idempotent.
    pub async fn copy_build_inputs_to_outputs(&self, build_id: i64) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO build_outputs (build_id, job_id, resource_id, version_id) \
             SELECT build_id, job_id, resource_id, version_id FROM build_inputs \
             WHERE build_id = $1 \
             ON CONFLICT (build_id, resource_id, version_id) DO NOTHING",
        )
        .bind(build_id)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// A build's inputs (by name) and then its outputs.
    pub async fn build_versions(
        &self,
        build_id: i64,
    ) -> Result<(Vec<BuildVersionRecord>, Vec<BuildVersionRecord>), StoreError> {
        let inputs = sqlx::query(
            "SELECT name, resource_id, version_id FROM build_inputs WHERE build_id = $1 \
             ORDER BY name",
        )
        .bind(build_id)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(|r| {
            Ok(BuildVersionRecord {
                name: Some(r.try_get("name")?),
                resource_id: r.try_get("resource_id")?,
                version_id: r.try_get("version_id")?,
            })
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
        let outputs = sqlx::query(
            "SELECT resource_id, version_id FROM build_outputs WHERE build_id = $1 \
             ORDER BY resource_id, version_id",
        )
        .bind(build_id)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(|r| {
            Ok(BuildVersionRecord {
                name: None,
                resource_id: r.try_get("resource_id")?,
                version_id: r.try_get("version_id")?,
            })
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
        Ok((inputs, outputs))
    }
}
