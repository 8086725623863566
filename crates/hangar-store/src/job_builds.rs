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

impl Store {
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
             VALUES ($1, NULL, $2, '{{}}', 'pending', $3) RETURNING {BUILD_COLUMNS}"
        ))
        .bind(format!("{name} #{number}"))
        .bind(plan)
        .bind(now)
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
