//! Builds of a pipeline's jobs, numbered per job (`P/J #N`).

use hangar_core::UnixMillis;
use sqlx::Row;

use crate::builds::{build_from_row, BuildRecord, BUILD_COLUMNS};
use crate::db::Store;
use crate::error::StoreError;

/// A job's build and its number.
#[derive(Debug, Clone, PartialEq)]
pub struct JobBuildRecord {
    pub number: i64,
    pub build: BuildRecord,
}

/// The job a build belongs to, for recording its versions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildJob {
    pub job_id: i64,
    pub pipeline_id: i64,
}

/// A version a build used or produced, as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildVersionShown {
    /// The input's name (its get step's); `None` for an output.
    pub name: Option<String>,
    pub resource: String,
    /// The version as JSON (`{"ref": "…"}`).
    pub version: String,
}

impl Store {
    /// A build's inputs (by name) and outputs (by resource), with the
    /// resources' names and the versions' JSON.
    pub async fn build_versions_shown(
        &self,
        build_id: i64,
    ) -> Result<(Vec<BuildVersionShown>, Vec<BuildVersionShown>), StoreError> {
        let inputs = sqlx::query(
            "SELECT bi.name AS name, r.name AS resource, v.version AS version \
             FROM build_inputs bi JOIN resources r ON r.id = bi.resource_id \
             JOIN resource_versions v ON v.id = bi.version_id \
             WHERE bi.build_id = $1 ORDER BY bi.name",
        )
        .bind(build_id)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(|r| {
            Ok(BuildVersionShown {
                name: Some(r.try_get("name")?),
                resource: r.try_get("resource")?,
                version: r.try_get("version")?,
            })
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
        let outputs = sqlx::query(
            "SELECT r.name AS resource, v.version AS version \
             FROM build_outputs bo JOIN resources r ON r.id = bo.resource_id \
             JOIN resource_versions v ON v.id = bo.version_id \
             WHERE bo.build_id = $1 ORDER BY r.name, v.id",
        )
        .bind(build_id)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(|r| {
            Ok(BuildVersionShown {
                name: None,
                resource: r.try_get("resource")?,
                version: r.try_get("version")?,
            })
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
        Ok((inputs, outputs))
    }

    /// The job of a job build; none for a build of the plan API, or once
    /// its pipeline was destroyed.
    pub async fn build_job(&self, build_id: i64) -> Result<Option<BuildJob>, StoreError> {
        let row = sqlx::query(
            "SELECT j.id AS job_id, j.pipeline_id AS pipeline_id FROM job_builds jb \
             JOIN jobs j ON j.id = jb.job_id WHERE jb.build_id = $1",
        )
        .bind(build_id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| {
            Ok(BuildJob {
                job_id: r.try_get("job_id")?,
                pipeline_id: r.try_get("pipeline_id")?,
            })
        })
        .transpose()
    }

    /// The id of the pipeline's resource `name`, kept even once the config
    /// no longer names it (a build planned before still used it).
    pub async fn pipeline_resource_id(
        &self,
        pipeline_id: i64,
        name: &str,
    ) -> Result<Option<i64>, StoreError> {
        let row = sqlx::query("SELECT id FROM resources WHERE pipeline_id = $1 AND name = $2")
            .bind(pipeline_id)
            .bind(name)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| Ok(r.try_get("id")?)).transpose()
    }

    /// Creates the next build of job `job_id`, named `<name> #<N>`: the
    /// job's number is taken and the build made in one transaction, so two
    /// triggers never share a number.
    pub async fn create_job_build(
        &self,
        job_id: i64,
        name: &str,
        plan: &str,
        now: UnixMillis,
    ) -> Result<JobBuildRecord, StoreError> {
        let mut tx = self.pool.begin().await?;
        let row = sqlx::query(
            "UPDATE jobs SET next_build_number = next_build_number + 1 \
             WHERE id = $1 AND active = 1 RETURNING next_build_number",
        )
        .bind(job_id)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            return Err(StoreError::NotFound(format!("job {job_id} not found")));
        };
        let number: i64 = row.try_get::<i64, _>("next_build_number")? - 1;
        let row = sqlx::query(&format!(
            "INSERT INTO builds (name, team, plan, artifacts, status, created_at) \
             VALUES ($1, {}, $2, '{{}}', 'pending', $3) RETURNING {BUILD_COLUMNS}",
            crate::builds::job_team("$4")
        ))
        .bind(format!("{name} #{number}"))
        .bind(plan)
        .bind(now)
        .bind(job_id)
        .fetch_one(&mut *tx)
        .await?;
        let build = build_from_row(&row)?;
        sqlx::query("INSERT INTO job_builds (job_id, build_number, build_id) VALUES ($1, $2, $3)")
            .bind(job_id)
            .bind(number)
            .bind(build.id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(JobBuildRecord { number, build })
    }

    /// A job's builds, newest first.
    pub async fn job_builds(
        &self,
        job_id: i64,
        limit: i64,
    ) -> Result<Vec<JobBuildRecord>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT j.build_number, {} FROM job_builds j JOIN builds b ON b.id = j.build_id \
             WHERE j.job_id = $1 ORDER BY j.build_number DESC LIMIT $2",
            prefixed_build_columns()
        ))
        .bind(job_id)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(JobBuildRecord {
                    number: r.try_get("build_number")?,
                    build: build_from_row(r)?,
                })
            })
            .collect()
    }

    /// Build number `number` of a job, if it exists.
    pub async fn job_build(
        &self,
        job_id: i64,
        number: i64,
    ) -> Result<Option<JobBuildRecord>, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT j.build_number, {} FROM job_builds j JOIN builds b ON b.id = j.build_id \
             WHERE j.job_id = $1 AND j.build_number = $2",
            prefixed_build_columns()
        ))
        .bind(job_id)
        .bind(number)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| {
            Ok(JobBuildRecord {
                number: r.try_get("build_number")?,
                build: build_from_row(&r)?,
            })
        })
        .transpose()
    }
}

/// The build columns, each read from `b`.
fn prefixed_build_columns() -> String {
    BUILD_COLUMNS
        .split(',')
        .map(|c| format!("b.{}", c.trim()))
        .collect::<Vec<_>>()
        .join(", ")
}
